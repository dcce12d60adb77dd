package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// loadResult is one run of a load generator against one server.
type loadResult struct {
	Tool     string
	Cmd      string // the command line, as docs/benchmarks.md shows it
	Complete int
	// Errors are requests that did not get a 2xx: ab's non-2xx responses and failed
	// requests (connect, receive, exceptions), or wrk's non-2xx responses and socket errors.
	Errors  int
	Seconds float64
	RPS     float64
	// Latencies in milliseconds.
	P50, P90, P99, Max float64
	// Curve is the response time (ms) at each percent of requests 0..100, from ab -e:
	// every request's time, sorted, sampled at 1% steps. Nil for wrk.
	Curve []float64
	// ClientCPU is the load generator's own CPU time, to tell when it is the bottleneck.
	ClientCPU float64
}

// abArgs is the community's command (MMS's and TorchServe's published benchmarks use
// ab -k -n N -c C -T type -p file), bounded by time (-t, before -n so that -n still caps
// it) so that every server gets the same window; -l accepts responses whose length varies
// (probabilities differ in their last digits between batch sizes), -r keeps going on
// socket errors and counts them, -s raises the 30 s timeout that resnet18 at c=256 nears.
func abArgs(conc int, d time.Duration, ctype, file, url, csv string) []string {
	return []string{"-k", "-l", "-r", "-q", "-s", "300", "-c", strconv.Itoa(conc),
		"-t", strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))), "-n", "1000000",
		"-T", ctype, "-p", file, "-e", csv, url}
}

// abArgsN bounds a run by count instead, for make bench-smoke's runs of under a second
// (ab's -t takes whole seconds).
func abArgsN(conc, n int, ctype, file, url, csv string) []string {
	return []string{"-k", "-l", "-r", "-q", "-s", "300", "-c", strconv.Itoa(conc), "-n", strconv.Itoa(n),
		"-T", ctype, "-p", file, "-e", csv, url}
}

func runAB(ctx context.Context, args []string, csv string) (loadResult, error) {
	r := loadResult{Tool: "ab", Cmd: "ab " + displayArgs(args)}
	cmd := exec.CommandContext(ctx, "ab", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.ProcessState != nil {
		r.ClientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", r.Cmd, err, lastLines(out.String(), 5))
	}
	text := out.String()
	r.Complete = intField(text, `Complete requests:\s+(\d+)`)
	failed := 0
	if m := regexp.MustCompile(`\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)`).FindStringSubmatch(text); m != nil {
		for _, i := range []int{1, 2, 4} { // Length is not an error with -l
			n, _ := strconv.Atoi(m[i])
			failed += n
		}
	}
	r.Errors = failed + intField(text, `Non-2xx responses:\s+(\d+)`)
	r.Seconds = floatField(text, `Time taken for tests:\s+([\d.]+) seconds`)
	r.RPS = floatField(text, `Requests per second:\s+([\d.]+)`)
	curve, err := readCurve(csv, r.Complete)
	if err != nil {
		return r, fmt.Errorf("%s: %v", r.Cmd, err)
	}
	r.Curve = curve
	r.P50, r.P90, r.P99, r.Max = curve[50], curve[90], curve[99], curve[100]
	return r, nil
}

// readCurve reads ab -e's "percent,ms" lines. ab indexes its sorted times with
// int(0.5 + done*p/100), which runs past the end for the top percents of a run of under 50
// requests and reads garbage there; those percents are the longest request.
func readCurve(path string, done int) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	curve := make([]float64, 101)
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p, v, ok := strings.Cut(sc.Text(), ",")
		if !ok {
			continue
		}
		i, err1 := strconv.Atoi(p)
		ms, err2 := strconv.ParseFloat(v, 64)
		if err1 != nil || err2 != nil || i < 0 || i > 100 {
			continue
		}
		curve[i] = ms
		seen++
	}
	if seen != 101 {
		return nil, fmt.Errorf("%s: %d percentiles, want 101 (no request completed?)", path, seen)
	}
	for i := 1; i < 100; i++ {
		if int(0.5+float64(done)*float64(i)/100) >= done {
			curve[i] = curve[100]
		}
	}
	return curve, sc.Err()
}

// wrkArgs runs wrk on one thread, the lightest client for the fastest points.
func wrkArgs(conc int, d time.Duration, url string) []string {
	return []string{"-t1", "-c" + strconv.Itoa(conc), "-d" + strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s",
		"--timeout", "300s", "--latency", "-s", "bench/wrk/post.lua", url}
}

func runWrk(ctx context.Context, args []string, ctype, file string) (loadResult, error) {
	r := loadResult{Tool: "wrk", Cmd: fmt.Sprintf("BENCH_BODY=%s BENCH_CONTENT_TYPE=%s wrk %s", file, ctype, displayArgs(args))}
	cmd := exec.CommandContext(ctx, "wrk", args...)
	cmd.Env = append(os.Environ(), "BENCH_BODY="+file, "BENCH_CONTENT_TYPE="+ctype)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.ProcessState != nil {
		r.ClientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", r.Cmd, err, lastLines(out.String(), 5))
	}
	text := out.String()
	m := regexp.MustCompile(`(\d+) requests in ([\d.]+)(\w+),`).FindStringSubmatch(text)
	if m == nil {
		return r, fmt.Errorf("%s: no request count in: %s", r.Cmd, lastLines(text, 8))
	}
	r.Complete, _ = strconv.Atoi(m[1])
	r.Seconds = wrkDuration(m[2], m[3]) / 1000
	r.RPS = floatField(text, `Requests/sec:\s+([\d.]+)`)
	r.Errors = intField(text, `Non-2xx or 3xx responses:\s+(\d+)`)
	if m := regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`).FindStringSubmatch(text); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			r.Errors += n
		}
	}
	pct := func(p string) float64 {
		m := regexp.MustCompile(`\s` + p + `%\s+([\d.]+)(\w+)`).FindStringSubmatch(text)
		if m == nil {
			return 0
		}
		return wrkDuration(m[1], m[2])
	}
	r.P50, r.P90, r.P99 = pct("50"), pct("90"), pct("99")
	if m := regexp.MustCompile(`Latency\s+[\d.]+\w+\s+[\d.]+\w+\s+([\d.]+)(\w+)`).FindStringSubmatch(text); m != nil {
		r.Max = wrkDuration(m[1], m[2])
	}
	return r, nil
}

// wrkDuration converts wrk's "13.36ms", "850.00us", "1.02s", "2.00m" to milliseconds.
func wrkDuration(v, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return f / 1000
	case "ms":
		return f
	case "s":
		return f * 1000
	case "m":
		return f * 60000
	case "h":
		return f * 3600000
	}
	return f
}

func intField(text, re string) int {
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func floatField(text, re string) float64 {
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

// displayArgs shows a command line with the per-run scratch file names shortened.
func displayArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if i > 0 && args[i-1] == "-e" {
			a = filepath.Base(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
