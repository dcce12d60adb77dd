package handlerproc

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The supervisors contain a handler's processes, but a handler shares its supervisor's user
// and may kill it: its children are then orphaned. With ReapOrphans, torchd is their
// subreaper (PR_SET_CHILD_SUBREAPER), so they come to torchd instead of init, and it kills
// and reaps every child of its own that it did not start. Every process torchd starts must
// then be started here (startTracked), so that the reaper knows it: in torchd only this
// package starts processes. A child in torchd's own process group is left alone, should a
// library start one with popen: a handler's processes are in their supervisor's group or a
// session of their own. It kills only the orphans of handler trees (marked in their
// environment, handlerMark), and reaps the rest when they exit: other orphans may come to it
// (when torchd is PID 1, a `docker exec`'s; in a test binary, a server a test started).

var (
	reaperOn  sync.Once
	reaping   bool
	childMu   sync.Mutex // held while a child starts and is recorded, and while orphans are reaped
	children  = map[int]bool{}
	orphans   = map[int]bool{} // handlers' orphans killed, to reap once they are zombies
	reapEvery = time.Second
)

// ReapOrphans makes this process the subreaper of what handlers start, and kills and reaps
// each orphan that comes to it, checking every second. Call it once at start-up, before any
// handler process starts, in a process that starts children only through this package.
func ReapOrphans(log *slog.Logger) {
	reaperOn.Do(func() {
		const prSetChildSubreaper = 36
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); errno != 0 {
			log.Warn("cannot be the subreaper of handler processes: a handler that kills its supervisor leaves its children to init", "err", describeErrno(errno))
			return
		}
		childMu.Lock()
		reaping = true
		childMu.Unlock()
		go func() {
			for range time.Tick(reapEvery) {
				reapOrphans(log)
			}
		}()
	})
}

// startTracked starts cmd, on the spawner thread when spawn is set, recording its pid so
// that the reaper leaves it alone; forget it once it has been waited for.
func startTracked(cmd *exec.Cmd, spawn bool) error {
	childMu.Lock()
	defer childMu.Unlock()
	var err error
	if spawn {
		err = startOnSpawnThread(cmd)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		children[cmd.Process.Pid] = true
	}
	return err
}

// track records pid as a process this one waits for itself, should it become its child (a
// fork server's process, once the fork server exits).
func track(pid int) {
	childMu.Lock()
	children[pid] = true
	childMu.Unlock()
}

// subreaping reports whether this process is the subreaper of what handlers start.
func subreaping() bool {
	childMu.Lock()
	defer childMu.Unlock()
	return reaping
}

// forget drops a child torchd has waited for: its pid may be another process's next.
func forget(pid int) {
	childMu.Lock()
	delete(children, pid)
	childMu.Unlock()
}

// runTracked is cmd.CombinedOutput, with cmd started by startTracked.
func runTracked(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startTracked(cmd, false); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	forget(cmd.Process.Pid)
	return out.Bytes(), err
}

// reapOrphans SIGKILLs and reaps each child of this process that it did not start: an
// orphan of a handler's tree.
func reapOrphans(log *slog.Logger) {
	me := os.Getpid()
	procs := readProcs()
	childMu.Lock()
	defer childMu.Unlock()
	if !reaping {
		return
	}
	group := syscall.Getpgrp()
	for _, e := range procs[me] {
		if children[e.pid] {
			continue
		}
		if pg, err := syscall.Getpgid(e.pid); err == nil && pg == group {
			continue
		}
		if e.state != 'Z' {
			// Only what a handler's tree started is killed: another orphan that comes to
			// this process (a `docker exec`'s under PID 1) is not torchd's to kill.
			if !marked(e.pid) {
				continue
			}
			log.Warn("killed a process a handler left behind", "pid", e.pid)
			syscall.Kill(e.pid, syscall.SIGKILL)
			orphans[e.pid] = true
		} else if !orphans[e.pid] && me != 1 {
			// A zombie's environment is gone: it is reaped when it was seen as a handler's
			// orphan. Another may be a child whose own Wait is coming (a process a library
			// or a test started with exec); only init reaps every one.
			continue
		}
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(e.pid, &ws, syscall.WNOHANG, nil); pid == e.pid {
			delete(orphans, e.pid)
		}
	}
}

// handlerMark is in the environment of every handler process (and of what it starts, unless
// it clears its environment): the reaper kills only what has it.
func handlerMark() string { return "TORCHD_HANDLER_OF=" + strconv.Itoa(os.Getpid()) }

// marked reports whether pid's environment, as it started, holds handlerMark.
func marked(pid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return bytes.Contains(append([]byte{0}, b...), []byte("\x00"+handlerMark()+"\x00"))
}
