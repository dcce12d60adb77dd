package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// replica is one torchd process, configured as a pod of deploy/kubernetes would be: its own
// address, a CPU limit, one worker per model, snapshots off, models from the store.
type replica struct {
	ID      int
	net     *podNet
	cpu     *cpuLimit
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	exitErr error
	Starts  []time.Time
}

var client = &http.Client{Timeout: 10 * time.Second}

func (r *replica) InferenceURL() string { return "http://" + r.net.IP + ":8080" }
func (r *replica) metricsURL() string   { return "http://" + r.net.IP + ":8082/metrics" }
func (r *replica) Addr() string         { return r.net.IP + ":8080" }

// start runs torchd in the replica's namespace and cgroup. The cgroup is joined before
// torchd is executed, so that Go's runtime sees the CPU limit from its first instruction;
// `ip netns exec` execs torchd in place, so the pid is torchd's.
func (r *replica) start(o *options) error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	tmp := filepath.Join(o.out, "tmp", fmt.Sprintf("replica-%d", r.ID))
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	mgmt := "127.0.0.1:8081" // the namespace's own loopback, as in a pod
	if r.net.ns == "" {
		mgmt = r.net.IP + ":8081"
	}
	args := append(r.net.exec(), o.torchd, "serve",
		"--inference-address="+r.net.IP+":8080",
		"--metrics-address="+r.net.IP+":8082",
		"--management-address="+mgmt,
		"--model-store="+o.store,
		"--models="+o.models,
		"--workers=1",
		"--threads="+strconv.Itoa(o.threads),
		"--enable-snapshots=false",
		"--shutdown-timeout=30s",
	)
	if r.cpu != nil {
		// sh writes its own pid into the cgroup, then execs the rest in place.
		args = append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, r.cpu.procs}, args...)
	}
	fmt.Fprintf(logf, "=== scaletest: start %s\n", strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	r.cmd, r.done, r.exitErr = cmd, make(chan struct{}), nil
	r.Starts = append(r.Starts, time.Now())
	go func() {
		r.exitErr = cmd.Wait()
		logf.Close()
		close(r.done)
	}()
	return nil
}

func (r *replica) running() bool {
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// waitReady polls /ping until it answers 200, as a readiness probe does.
func (r *replica) waitReady(timeout time.Duration) (time.Duration, error) {
	start := r.Starts[len(r.Starts)-1]
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !r.running() {
			return 0, fmt.Errorf("replica %d exited before it was ready (%v); see %s", r.ID, r.exitErr, r.logPath)
		}
		if resp, err := client.Get(r.InferenceURL() + "/ping"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(start), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("replica %d not ready after %v; see %s", r.ID, timeout, r.logPath)
}

func (r *replica) signal(s syscall.Signal) error { return r.cmd.Process.Signal(s) }

// wait waits for the process to exit; false if it did not within timeout.
func (r *replica) wait(timeout time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends SIGTERM and waits for the drain, then SIGKILL.
func (r *replica) stop() {
	if !r.running() {
		return
	}
	r.signal(syscall.SIGTERM)
	if !r.wait(40 * time.Second) {
		r.signal(syscall.SIGKILL)
		r.wait(5 * time.Second)
	}
}

// metrics scrapes the replica's Prometheus endpoint into series → value.
func (r *replica) metrics() (map[string]float64, error) {
	resp, err := client.Get(r.metricsURL())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// sumSeries adds the series of metric whose labels contain every one of labels.
func sumSeries(m map[string]float64, metric string, labels ...string) float64 {
	var sum float64
	for k, v := range m {
		if !strings.HasPrefix(k, metric+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// cpuSeconds is the CPU time (user + system) the process has used: /proc/<pid>/stat's
// utime and stime, in clock ticks of 1/100 s (USER_HZ on Linux).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields resume after its closing parenthesis.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func (r *replica) cpuSeconds() float64 {
	if !r.running() {
		return 0
	}
	return cpuSeconds(r.cmd.Process.Pid)
}
