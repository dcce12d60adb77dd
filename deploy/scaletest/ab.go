package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// abResult is what ApacheBench reports for one run.
type abResult struct {
	Complete    int
	Failed      int
	Non2xx      int
	Seconds     float64
	RPS         float64
	MeanMS      float64
	P50, P90    int // ms
	P99, MaxMS  int
	CPUSeconds  float64 // ab's own CPU time
	Concurrency int
	KeepAlive   bool
}

// runAB posts body (a file) to url with keep-alive at concurrency c, for n requests, or for
// d if d > 0 (then n only bounds it). -r keeps ab going on socket errors, so that failures
// are counted instead of ending the run.
func runAB(url, body, contentType string, c, n int, d time.Duration) (*abResult, string, error) {
	return runABWith(true, url, body, contentType, c, n, d)
}

// runABWith is runAB with or without keep-alive.
func runABWith(keepAlive bool, url, body, contentType string, c, n int, d time.Duration) (*abResult, string, error) {
	args := []string{"-r", "-q", "-s", "60", "-c", strconv.Itoa(c)}
	if keepAlive {
		args = append(args, "-k")
	}
	if d > 0 {
		args = append(args, "-t", strconv.Itoa(int(d.Seconds())))
	}
	args = append(args, "-n", strconv.Itoa(n), "-T", contentType, "-p", body, url)
	cmd := exec.Command("ab", args...)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		return nil, text, fmt.Errorf("ab %s: %v\n%s", strings.Join(args, " "), err, text)
	}
	r := &abResult{Concurrency: c, KeepAlive: keepAlive}
	r.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	num := func(pattern string) float64 {
		m := regexp.MustCompile(`(?m)^` + pattern + `\s+([0-9.]+)`).FindStringSubmatch(text)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	r.Complete = int(num(`Complete requests:`))
	r.Failed = int(num(`Failed requests:`))
	r.Non2xx = int(num(`Non-2xx responses:`))
	r.Seconds = num(`Time taken for tests:`)
	r.RPS = num(`Requests per second:`)
	r.MeanMS = num(`Time per request:`)
	r.P50 = int(num(`\s*50%`))
	r.P90 = int(num(`\s*90%`))
	r.P99 = int(num(`\s*99%`))
	r.MaxMS = int(num(`\s*100%`))
	if r.Complete == 0 {
		return r, text, fmt.Errorf("ab completed no request:\n%s", text)
	}
	return r, text, nil
}
