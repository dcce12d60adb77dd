package handlerproc

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A handler is users' code: it may start processes, and they may call setsid and leave the
// worker's process group, which a group kill then misses. So each worker runs under a small
// supervisor (supervisor.py, on the handler runtime's Python, isolated from the model's
// PYTHONPATH) that is the subreaper of the worker's whole tree: every process the handler
// starts stays its descendant, it reaps them, and it kills them all when the worker exits,
// when torchd stops the worker, and when torchd dies (its death signal, and its stdin pipe's
// close). The worker itself dies with the supervisor (its own death signal). What this does
// not contain is in docs/guide/security.md.

//go:embed supervisor.py
var supervisorScript string

// supervised is the command that runs argv (the worker) under a supervisor, whose script it
// writes into dir (the worker's private directory).
func supervised(python, dir string, argv ...string) (*exec.Cmd, error) {
	script := filepath.Join(dir, "supervisor.py")
	if err := os.WriteFile(script, []byte(supervisorScript), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(python, append([]string{"-I", "-S", script}, argv...)...)
	// Its own process group, so that the terminal's signals to torchd do not reach it, and the
	// parent-death signal: the supervisor's SIGTERM kills the tree, then itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	return cmd, nil
}

// The parent-death signal fires when the thread that forked the child exits, not the
// process: Go ends a thread whose goroutine exits while locked to it. So every supervisor is
// started from one thread that never exits.
var (
	spawnOnce sync.Once
	spawnCh   chan func()
)

// startOnSpawnThread runs cmd.Start on the spawner thread.
func startOnSpawnThread(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as torchd
			for f := range spawnCh {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- func() { done <- cmd.Start() }
	return <-done
}

// procEntry is one process in /proc: its parent and state.
type procEntry struct {
	pid, ppid int
	state     byte
}

// procTable is every process's children, read from /proc once.
type procTable map[int][]procEntry

func readProcs() procTable {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	kids := procTable{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		kids[ppid] = append(kids[ppid], procEntry{pid: pid, ppid: ppid, state: f[0][0]})
	}
	return kids
}

// below is root's process tree below it; zombies included.
func (kids procTable) below(root int) []procEntry {
	var out []procEntry
	todo := []int{root}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, e := range kids[p] {
			out = append(out, e)
			todo = append(todo, e.pid)
		}
	}
	return out
}

// descendants is root's process tree below it, read from /proc; zombies included.
func descendants(root int) []procEntry { return readProcs().below(root) }

// killTree SIGKILLs root's live descendants and then root's process group: the way out when
// the supervisor itself does not stop them.
func killTree(root int) {
	for range 100 {
		n := 0
		for _, e := range descendants(root) {
			if e.state != 'Z' {
				syscall.Kill(e.pid, syscall.SIGKILL)
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	syscall.Kill(-root, syscall.SIGKILL)
}

// treeRSS is the resident memory of root and its descendants in procs, in bytes.
func (kids procTable) treeRSS(root int) int64 {
	n := rss(root)
	for _, e := range kids.below(root) {
		n += rss(e.pid)
	}
	return n
}
