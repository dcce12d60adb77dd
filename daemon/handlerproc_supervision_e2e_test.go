package daemon_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchd/torchd/daemon"
)

// procTree is pid's descendants, with their command lines, from /proc.
func procTree(pid int) map[int]string {
	kids := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		kids[ppid] = append(kids[ppid], p)
	}
	out := map[int]string{}
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, k := range kids[p] {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k))
			out[k] = strings.ReplaceAll(string(b), "\x00", " ")
			todo = append(todo, k)
		}
	}
	return out
}

// A handler's detached children (setsid) go with torchd at a stop, which keeps to
// shutdown_timeout with a batch that hangs: the daemon's stop, so a whole server (with its
// model unregistered: handlerproc/served's TestHandlerProcessChildrenContained).
func TestHandlerProcessChildrenAtStop(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pykids", "handler.py")
	s := startServer(t, "--python", py, "--shutdown-timeout", "5s")
	s.register(t, "url=pykids.mar&initial_workers=1&response_timeout=600&synchronous=true")
	spawn := func() []int {
		file := filepath.Join(t.TempDir(), "pid")
		r := post(s.inf+"/predictions/pykids", "application/json", []byte(fmt.Sprintf(`{"spawn": %q}`, file)))
		if r.status != 200 {
			t.Fatalf("spawn: %d %s", r.status, r.body)
		}
		var pids []int
		for _, f := range strings.FieldsFunc(string(r.body), func(r rune) bool { return r < '0' || r > '9' }) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		b, err := os.ReadFile(file)
		n, err2 := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || err2 != nil || len(pids) != 1 {
			t.Fatalf("spawn answered %s; orphan %q", r.body, b)
		}
		return append(pids, n)
	}
	waitGone := func(what string, pids []int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for _, pid := range pids {
			for {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				if err != nil || strings.Contains(string(b), ") Z ") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the handler's child %d still runs", what, pid)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	kids := spawn()
	hung := make(chan response, 1)
	go func() { hung <- post(s.inf+"/predictions/pykids", "application/json", []byte(`"hang"`)) }()
	time.Sleep(500 * time.Millisecond) // let the hang reach the process; the test holds either way
	start := time.Now()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Exited:
	case <-time.After(60 * time.Second):
		t.Fatal("torchd did not exit within 60 s of SIGTERM")
	}
	t.Logf("stopped in %v with shutdown_timeout 5s", time.Since(start).Round(time.Millisecond))
	waitGone("after SIGTERM", kids)
	if n := len(procTree(s.Cmd.Process.Pid)); n != 0 {
		t.Errorf("%d processes left under torchd", n)
	}
	<-hung
}

// The socket directories of a killed torchd's handler processes are swept at the next start;
// a live worker's (one that listens) is kept, a dead one's of the old naming removed.
func TestSweepHandlerSocketDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec0(t)
	named := filepath.Join(tmp, fmt.Sprintf("torchd-%d-handler-123", dead))
	old := filepath.Join(tmp, "torchd-handler-456")
	live := filepath.Join(tmp, "torchd-handler-789")
	for _, d := range []string{named, old, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(old, ".ts.sock.0"), nil, 0o600) // a socket no one listens on
	l, err := net.Listen("unix", filepath.Join(live, ".ts.sock.0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	removed, _ := daemon.SweepTemp()
	for _, d := range []string{named, old} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s kept (removed %v)", filepath.Base(d), removed)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live worker's directory was removed: %v", err)
	}
}

// exec0 is the pid of a process that has exited.
func exec0(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	return p.Pid
}
