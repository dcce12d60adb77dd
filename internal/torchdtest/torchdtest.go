// Package torchdtest builds and runs the torchd binary for the tests whose subject is the
// whole process (daemon's end-to-end tests, the soak): free ports, the addresses it logs,
// its log, its end. Production code must not import it.
package torchdtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds cmd/torchd of the repository at root (the test's package's path to it: "..",
// "../..") into dir/torchd, with -race when race is set, and returns its path.
func Build(root, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "torchd")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, filepath.Join(root, "cmd", "torchd"))...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building torchd: %w", err)
	}
	return bin, nil
}

// ServeArgs are `torchd serve`'s arguments for a model store with every API on a free port
// of 127.0.0.1.
func ServeArgs(store string) []string {
	return []string{"serve", "--model-store", store,
		"--inference-address", "127.0.0.1:0", "--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
		"--grpc-address", "127.0.0.1:0", "--grpc-inference-address", "127.0.0.1:0", "--grpc-management-address", "127.0.0.1:0"}
}

// APIs are the names torchd logs its listeners under.
var APIs = []string{"inference", "management", "metrics", "grpc", "grpc_inference", "grpc_management"}

// Process is a running torchd.
type Process struct {
	Cmd *exec.Cmd
	// Addrs are the APIs' host:ports by name (APIs), as torchd logged them.
	Addrs   map[string]string
	Exited  chan struct{} // closed when the process has ended
	ExitErr error         // its end, once Exited is closed
	mu      sync.Mutex
	log     bytes.Buffer
}

var listenRE = regexp.MustCompile(`msg=listening api=(\w+) addr=(\S+)`)

// Start runs bin with args and env (added to this process's) and waits until every API
// listens; it fails the test if torchd exits first or takes over 30 s. Stop runs when the
// test ends.
func Start(t testing.TB, bin string, env, args []string) *Process {
	t.Helper()
	p := &Process{Addrs: map[string]string{}, Exited: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, len(APIs))
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrs <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
	}()
	go func() {
		p.ExitErr = p.Cmd.Wait()
		close(p.Exited)
	}()
	t.Cleanup(p.Stop)
	deadline := time.After(30 * time.Second)
	for len(p.Addrs) < len(APIs) {
		select {
		case a := <-addrs:
			p.Addrs[a[0]] = a[1]
		case <-p.Exited:
			t.Fatalf("torchd exited: %v\n%s", p.ExitErr, p.Log())
		case <-deadline:
			t.Fatalf("torchd did not listen within 30 s\n%s", p.Log())
		}
	}
	return p
}

// Log returns what the process has logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Stop sends SIGTERM and waits for the end, killing the process after 30 s.
func (p *Process) Stop() {
	select {
	case <-p.Exited:
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
	case <-time.After(30 * time.Second):
		p.Cmd.Process.Kill()
		<-p.Exited
	}
}
