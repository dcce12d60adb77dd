package handlerproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchd/torchd/core/coretest"
)

// probe is what a handler process tells of how it started (the tiny handler's "probe").
type probe struct {
	PID     int      `json:"pid"`
	PPID    int      `json:"ppid"`
	Cwd     string   `json:"cwd"`
	Path0   string   `json:"path0"`
	Threads int      `json:"threads"`
	Numpy   int      `json:"numpy"`
	Mark    []string `json:"mark"`
	// The allocator's variables in the worker's environment, and whether torch asked huge
	// pages for a tensor of 8 MiB.
	AllocEnv map[string]*string `json:"alloc_env"`
	Hugepage bool               `json:"hugepage"`
}

func probeModel(t *testing.T, m *Model) probe {
	t.Helper()
	pr, err := m.Predict([]Request{jsonReq("probe", `"probe"`)})
	if err != nil || pr.Code != 200 || len(pr.Replies) != 1 {
		t.Fatalf("probe: %+v, %v", pr, err)
	}
	var p probe
	if err := json.Unmarshal(pr.Replies[0].Body, &p); err != nil {
		t.Fatalf("probe answered %s: %v", pr.Replies[0].Body, err)
	}
	return p
}

// ppid is pid's parent, from /proc; 0 when it is gone.
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, _ := strconv.Atoi(f[1])
	return n
}

func liveProcesses(m *Model) []*process {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*process
	for p := range m.live {
		out = append(out, p)
	}
	return out
}

func currentForkServer(t *testing.T, m *Model) *forkServer {
	t.Helper()
	forkMu.Lock()
	defer forkMu.Unlock()
	fs := forkServers[m.rt]
	if fs == nil {
		t.Fatalf("no fork server runs (%v)", forkFailed[m.rt])
	}
	return fs
}

// Processes are forked from the runtime's one fork server, a child of torchd, each under a
// supervisor of its own (the fork server's child, exec'd); a forked process sees what one started apart sees: the model's
// directory as its working directory and first on its path, the thread count torch chooses
// (no pool inherited), a random state of its own, and the handler mark.
func TestForkServerForks(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Processes = 2 })
	if err != nil {
		t.Fatal(err)
	}
	fs := currentForkServer(t, m)
	if got := ppid(fs.pid); got != os.Getpid() {
		t.Errorf("the fork server's parent is %d, not this process (%d)", got, os.Getpid())
	}
	for _, p := range liveProcesses(m) {
		if got := ppid(p.pid); got != fs.pid {
			t.Errorf("supervisor %d's parent is %d, not the fork server %d", p.pid, got, fs.pid)
		}
		// The worker may be serving before its supervisor's exec has named it.
		coretest.WaitFor(t, "the supervisor's name torchd-sup", func() bool {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/comm")
			return strings.TrimSpace(string(b)) == "torchd-sup"
		})
		// Exec'd once the worker is forked: it holds none of the fork server's pages.
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline"); !strings.Contains(string(b), "supervisor.py\x00--adopt") {
			t.Errorf("supervisor %d runs %q, not supervisor.py --adopt", p.pid, strings.ReplaceAll(string(b), "\x00", " "))
		}
		for _, e := range descendants(p.pid) {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/comm"); strings.TrimSpace(string(b)) == "torchd-sup" {
				t.Errorf("supervisor %d's worker %d has its supervisor's name", p.pid, e.pid)
			}
		}
	}
	forked := []probe{probeModel(t, m), probeModel(t, m)}
	if forked[0].PID == forked[1].PID {
		// Two batches one after the other may take the same idle process; a third shows both.
		forked[1] = probeModel(t, m)
	}
	apart, err := startTiny(t, "handler.py", func(c *Config) { c.StartApart = true })
	if err != nil {
		t.Fatal(err)
	}
	if got := ppid(onlyProcess(t, apart).pid); got != os.Getpid() {
		t.Errorf("a process started apart has the parent %d, not this process", got)
	}
	want := probeModel(t, apart)
	for _, got := range forked {
		if got.Path0 != got.Cwd {
			t.Errorf("forked: the model's directory %s is not first on the path (%s)", got.Cwd, got.Path0)
		}
		if want.Path0 != want.Cwd {
			t.Errorf("apart: the model's directory %s is not first on the path (%s)", want.Cwd, want.Path0)
		}
		if got.Threads != want.Threads || got.Threads < 1 || got.Threads > runtime.NumCPU() {
			t.Errorf("forked: torch runs %d threads; apart %d (%d CPUs)", got.Threads, want.Threads, runtime.NumCPU())
		}
		if len(got.Mark) != 1 {
			t.Errorf("forked: the handler mark is %v", got.Mark)
		}
	}
	if forked[0].PID != forked[1].PID && forked[0].Numpy == forked[1].Numpy {
		t.Errorf("two forked processes drew the same random number %d: they share the fork server's state", forked[0].Numpy)
	}
}

// The fork server killed takes its processes' trees with it (children that called setsid
// included); their model restarts them from a new fork server and serves on.
func TestForkServerKilled(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := currentForkServer(t, m)
	kids := spawn(t, m)
	old := onlyProcess(t, m).pid
	tree := descendants(old)
	if err := syscall.Kill(fs.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "after the fork server's kill", append(kids, old)...)
	for _, e := range tree {
		waitGone(t, "after the fork server's kill", e.pid)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)})
		if err == nil && pr.Code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the fork server's kill: %+v, %v", pr, err)
		}
	}
	if next := currentForkServer(t, m); next == fs || ppid(onlyProcess(t, m).pid) != next.pid {
		t.Errorf("the restarted process is not forked from a new fork server")
	}
}

// A process whose environment the fork server cannot give starts apart: a variable read as
// a library loads, a model module of the name of one the fork server imported.
func TestForkServerStartsApart(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Env = []string{"OMP_NUM_THREADS=1"} })
	if err != nil {
		t.Fatal(err)
	}
	if got := ppid(onlyProcess(t, m).pid); got != os.Getpid() {
		t.Errorf("with OMP_NUM_THREADS set for the model, its process's parent is %d, not this process", got)
	}
	if p := probeModel(t, m); p.Threads != 1 {
		t.Errorf("OMP_NUM_THREADS=1: torch runs %d threads", p.Threads)
	}
	// The tiny handler does not import torchvision, which the fork server preloads.
	m2, err := startTiny(t, "handler.py", func(c *Config) {
		if err := os.WriteFile(filepath.Join(c.ModelDir, "torchvision.py"), []byte("SHADOW = True\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ppid(onlyProcess(t, m2).pid); got != os.Getpid() {
		t.Errorf("with a torchvision.py of its own, the model's process's parent is %d, not this process", got)
	}
}

// A runtime whose fork server cannot start (here, one that fails to import what it preloads)
// still serves: its processes start apart, and the start is not tried again for each one.
func TestForkServerFailsProcessesStartApart(t *testing.T) {
	py := testPython(t)
	dir := t.TempDir()
	shim := filepath.Join(dir, "python")
	script := "#!/bin/sh\ncase \"$2\" in *forkserver.py) echo 'ImportError: no torch for the fork server' >&2; exit 1;; esac\nexec " + py + " \"$@\"\n"
	if err := os.WriteFile(shim, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Python = shim; c.Processes = 2 })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range liveProcesses(m) {
		if got := ppid(p.pid); got != os.Getpid() {
			t.Errorf("process %d's parent is %d, not this process", p.pid, got)
		}
	}
	forkMu.Lock()
	why := forkFailed[m.rt]
	forkMu.Unlock()
	if why == nil || !strings.Contains(why.Error(), "no torch for the fork server") {
		t.Errorf("the fork server's failure is %v; want its error line", why)
	}
	if pr, err := m.Predict([]Request{jsonReq("a", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Errorf("predict: %+v, %v", pr, err)
	}
}

// reaped reports whether pid is gone and not a zombie: something waited for it.
func reaped(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return os.IsNotExist(err)
}

// waitReaped waits until every pid has exited and been waited for.
func waitReaped(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		coretest.WaitFor(t, fmt.Sprintf("%s: process %d reaped", what, pid), func() bool { return reaped(pid) })
	}
}

// An idle fork server exits (RetireForkServers) when this process is the subreaper: its
// processes become this process's children and serve on; one that crashes is waited for here
// and restarts from a new fork server; scaling up forks from a new one and scaling down
// stops processes whose fork server is gone; closing the model leaves nothing, not even a
// zombie.
func TestForkServerRetires(t *testing.T) {
	ReapOrphans(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	RetireForkServers(300 * time.Millisecond)
	t.Cleanup(func() { RetireForkServers(0) })
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Processes = 2 })
	if err != nil {
		t.Fatal(err)
	}
	fs := currentForkServer(t, m)
	waitReaped(t, "the idle fork server", fs.pid)
	sups := map[int]bool{}
	for _, p := range liveProcesses(m) {
		sups[p.pid] = true
		if got := ppid(p.pid); got != os.Getpid() {
			t.Errorf("supervisor %d's parent is %d after its fork server exited, not this process", p.pid, got)
		}
	}
	if len(sups) != 2 {
		t.Fatalf("%d processes; want 2", len(sups))
	}
	for range 3 {
		if pr, err := m.Predict([]Request{jsonReq("a", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
			t.Fatalf("after the fork server exited: %+v, %v", pr, err)
		}
	}
	// A crash: the supervisor's exit status reaches the model, which restarts the process.
	_, err = m.Predict([]Request{jsonReq("c", `"crash"`)})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("crash: %v; want the worker's exit status", err)
	}
	for pid := range sups {
		if gone(pid) {
			waitReaped(t, "the crashed process's supervisor", pid)
			delete(sups, pid)
		}
	}
	if len(sups) != 1 {
		t.Fatalf("the crash ended %d supervisors; want 1", 2-len(sups))
	}
	coretest.WaitFor(t, "the crashed process restarted", func() bool { return m.ProcessCount() == 2 && len(liveProcesses(m)) == 2 })
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the restart: %+v, %v", pr, err)
	}
	if next := currentForkServer(t, m); next == fs {
		t.Error("the restart used the fork server that exited")
	}
	// Scaling: up from a new fork server, then down, each process stopped and waited for.
	if err := m.SetProcesses(3); err != nil || m.ProcessCount() != 3 {
		t.Fatalf("scaled to 3: %d processes, %v", m.ProcessCount(), err)
	}
	var all []int
	for _, p := range liveProcesses(m) {
		all = append(all, p.pid)
		all = append(all, pidsOf(descendants(p.pid))...)
	}
	if err := m.SetProcesses(1); err != nil {
		t.Fatal(err)
	}
	coretest.WaitFor(t, "scaled down to 1", func() bool { return len(liveProcesses(m)) == 1 })
	if pr, err := m.Predict([]Request{jsonReq("d", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after scaling down: %+v, %v", pr, err)
	}
	waitReaped(t, "the new fork server", currentForkServer(t, m).pid)
	m.Close()
	waitReaped(t, "after the model's close", all...)
	for _, e := range descendants(os.Getpid()) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(e.pid) + "/environ"); strings.Contains(string(b), handlerMark()) {
			t.Errorf("process %d of a handler is left after the close", e.pid)
		}
	}
}

func pidsOf(es []procEntry) []int {
	var out []int
	for _, e := range es {
		out = append(out, e.pid)
	}
	return out
}

// A fork asked of a fork server as it is told to exit goes to a new one; the old one's
// process serves on as this process's child.
func TestForkServerRetiredForkAsksNext(t *testing.T) {
	ReapOrphans(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := currentForkServer(t, m)
	old := onlyProcess(t, m).pid
	fs.retire()
	if _, err := fs.fork(nil, "", nil, nil, nil); !errors.Is(err, errForkServerRetired) {
		t.Fatalf("a fork asked of a retired fork server: %v; want errForkServerRetired", err)
	}
	if err := m.SetProcesses(2); err != nil {
		t.Fatal(err)
	}
	waitReaped(t, "the retired fork server", fs.pid)
	next := currentForkServer(t, m)
	if next == fs {
		t.Fatal("the retired fork server is still the runtime's")
	}
	for _, p := range liveProcesses(m) {
		want := next.pid
		if p.pid == old {
			want = os.Getpid()
		}
		if got := ppid(p.pid); got != want {
			t.Errorf("supervisor %d's parent is %d; want %d", p.pid, got, want)
		}
	}
	for range 3 {
		if pr, err := m.Predict([]Request{jsonReq("a", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
			t.Fatalf("predict: %+v, %v", pr, err)
		}
	}
}
