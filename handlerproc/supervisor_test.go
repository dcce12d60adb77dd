package handlerproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid has exited: no process, or a zombie that only its reaper keeps.
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	return strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}

// waitGone waits for every pid to exit; the bound only ends a test that failed.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				t.Fatalf("%s: process %d (%s) is still running", what, pid, strings.ReplaceAll(string(b), "\x00", " "))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// readPid waits for the pid a handler's child wrote into file.
func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if pid, err2 := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && err2 == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawn has the handler start two children that leave its process group (a session of
// their own; one orphaned at once) and returns their pids.
func spawn(t *testing.T, m *Model) []int {
	t.Helper()
	file := filepath.Join(t.TempDir(), "orphan.pid")
	pr, err := m.Predict([]Request{jsonReq("spawn", fmt.Sprintf(`{"spawn": %q}`, file))})
	if err != nil || pr.Code != 200 || len(pr.Replies) != 1 {
		t.Fatalf("spawn: %+v, %v", pr, err)
	}
	var ans struct{ Pids []int }
	if err := json.Unmarshal(pr.Replies[0].Body, &ans); err != nil || len(ans.Pids) != 1 {
		t.Fatalf("spawn answered %s: %v", pr.Replies[0].Body, err)
	}
	pids := append(ans.Pids, readPid(t, file))
	for _, pid := range pids {
		if gone(pid) {
			t.Fatalf("the handler's child %d is not running", pid)
		}
	}
	return pids
}

// Children that call setsid stay in the worker's tree (the orphan comes to its supervisor,
// which reaps it), and unloading the model kills them all.
func TestDetachedChildrenDieWithModel(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	sup := onlyProcess(t, m).pid
	kids := spawn(t, m)
	inTree := map[int]bool{}
	for _, e := range descendants(sup) {
		inTree[e.pid] = true
	}
	for _, pid := range kids {
		if !inTree[pid] {
			t.Errorf("the handler's detached child %d left the supervisor's tree", pid)
		}
	}
	tree := descendants(sup)
	start := time.Now()
	m.Close()
	waitGone(t, "after Close", kids...)
	for _, e := range tree {
		waitGone(t, "after Close", e.pid)
	}
	// Close waited for the supervisor, which kills its tree before it exits.
	if d := time.Since(start); d > 9*time.Second {
		t.Logf("Close took %v", d) // not a failure: a loaded machine is slow
	}
}

// A worker that dies takes its detached children with it; its successor serves.
func TestDetachedChildrenDieWithWorker(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	kids := spawn(t, m)
	if _, err := m.Predict([]Request{jsonReq("a", `"crash"`)}); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("crash: %v", err)
	}
	waitGone(t, "after the worker's crash", kids...)
	if pr, err := m.Predict([]Request{jsonReq("b", `{"x":[1,2,3,4]}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("after the crash: %+v, %v", pr, err)
	}
}

// A hung worker killed at the response timeout takes its detached children with it.
func TestDetachedChildrenDieWithHungWorker(t *testing.T) {
	m, err := startTiny(t, "handler.py", func(c *Config) { c.ResponseTimeout = 3 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	kids := spawn(t, m)
	if _, err := m.Predict([]Request{jsonReq("a", `"hang"`)}); err == nil || !strings.Contains(err.Error(), "response timeout") {
		t.Fatalf("hang: %v", err)
	}
	waitGone(t, "after the hung worker's kill", kids...)
}

// helperEnv names the directory in which TestHelperServesModel, run as a process of its
// own, writes what the test that started it needs.
const helperEnv = "TORCHD_HANDLERPROC_HELPER"

// helperEnviron is the environment of a helper test process: the directory it reports in,
// and a TMPDIR inside this test's own, since a helper killed with SIGKILL never removes its
// temporary directories itself.
func helperEnviron(t *testing.T) []string {
	return append(os.Environ(), helperEnv+"="+t.TempDir(), "TMPDIR="+t.TempDir())
}

// TestHelperServesModel is not a test: run by TestParentKilledLeavesNothing as a stand-in
// for torchd, it starts a model, has its handler start detached children and then spin,
// prints its process tree, and waits to be killed.
func TestHelperServesModel(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("run by TestParentKilledLeavesNothing")
	}
	retire := os.Getenv(helperEnv+"_RETIRE") != ""
	if retire {
		ReapOrphans(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		RetireForkServers(200 * time.Millisecond)
	}
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	if retire {
		// Its supervisor is this process's child once the fork server has exited.
		waitReaped(t, "the idle fork server", currentForkServer(t, m).pid)
	}
	spawn(t, m)
	spinning := filepath.Join(dir, "spinning")
	go m.Predict([]Request{jsonReq("spin", fmt.Sprintf(`{"spin": %q}`, spinning))})
	readPid(t, spinning)
	var pids []string
	for _, e := range descendants(os.Getpid()) {
		pids = append(pids, strconv.Itoa(e.pid))
	}
	fmt.Println("tree", strings.Join(pids, " "))
	select {}
}

// kill -9 of the process that started a model (torchd) while its handler is busy leaves
// nothing running: not the worker, its supervisor, nor the handler's detached children; also
// when the fork server has exited and the supervisor is torchd's own child.
func TestParentKilledLeavesNothing(t *testing.T) {
	testPython(t)
	t.Run("forked", func(t *testing.T) { parentKilledLeavesNothing(t) })
	t.Run("fork server exited", func(t *testing.T) { parentKilledLeavesNothing(t, helperEnv+"_RETIRE=1") })
}

func parentKilledLeavesNothing(t *testing.T, env ...string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServesModel$", "-test.v")
	cmd.Env = append(helperEnviron(t), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var tree []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "tree "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				tree = append(tree, pid)
			}
			break
		}
	}
	// The supervisor, the worker, and the two detached sleeps (one a child of the worker's
	// sh, reparented to the supervisor) at least.
	if len(tree) < 4 {
		t.Fatalf("the helper's tree is %v", tree)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, "after kill -9 of the parent", tree...)
}

// The supervisor passes the worker's exit on: a crash's exit status, a signal's death.
func TestSupervisorExitStatus(t *testing.T) {
	py := testPython(t)
	for _, c := range []struct{ script, want string }{
		{"exit 3", "exit status 3"},
		{"kill -SEGV $$", "signal: segmentation fault"},
	} {
		cmd, err := supervised(py, t.TempDir(), "/bin/sh", "-c", c.script)
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe() // held open: its close is torchd's death
		if err != nil {
			t.Fatal(err)
		}
		if err := startOnSpawnThread(cmd); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		in.Close()
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: the supervisor exited with %v; want %s", c.script, err, c.want)
		}
	}
}

// TestHelperReapsOrphans is not a test: run by TestOrphansReaped as a process of its own
// (the subreaper is process-wide), it reaps orphans, has a handler start a detached child
// and kill its own supervisor, prints the child's pid, and waits.
func TestHelperReapsOrphans(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("run by TestOrphansReaped")
	}
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	ReapOrphans(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	file := filepath.Join(dir, "escaped.pid")
	go m.Predict([]Request{jsonReq("escape", fmt.Sprintf(`{"escape": %q}`, file))})
	fmt.Println("escaped", readPid(t, file))
	select {}
}

// A handler that kills its own supervisor leaves its detached children to torchd, the
// subreaper of what handlers start, which kills and reaps them.
func TestOrphansReaped(t *testing.T) {
	testPython(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReapsOrphans$", "-test.v")
	cmd.Env = helperEnviron(t)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "escaped "); ok {
			pid, _ = strconv.Atoi(rest)
			break
		}
	}
	if pid == 0 {
		t.Fatal("the helper printed no pid")
	}
	waitGone(t, "after its supervisor was killed", pid)
}

// A handler's processes carry the mark that torchd's reaper kills by; a process without it
// is not marked.
func TestHandlerMark(t *testing.T) {
	m, err := startTiny(t, "handler.py", nil)
	if err != nil {
		t.Fatal(err)
	}
	kids := spawn(t, m)
	for _, pid := range kids {
		if !marked(pid) {
			t.Errorf("the handler's child %d is not marked", pid)
		}
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if marked(other.Process.Pid) {
		t.Error("a process torchd did not start for a handler is marked")
	}
}
