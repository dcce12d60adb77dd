package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/torchd/torchd/handlerproc"
)

// staleTemp matches the directories torchd creates in TMPDIR: extracted archives, downloads,
// extracted AOTInductor packages (torch.PackageDirPrefix) and handler processes' sockets
// (handlerproc), named with the pid of the process that made them.
var staleTemp = regexp.MustCompile(`^torchd-(\d+)-(model|download|package|handler)-`)

// legacyHandlerDir is a handler process's socket directory as torchd made it before its name
// held the pid: it is stale when no process listens on its socket.
var legacyHandlerDir = regexp.MustCompile(`^torchd-handler-\d+$`)

// Each process holds an exclusive flock on TMPDIR/torchd-<pid>.lock for its lifetime. The
// kernel drops it the moment the process's files are closed, before it becomes a zombie
// that kill(pid, 0) still reports alive, so a sweep that can take the lock knows the owner
// is gone, with no race against a dying process.
var (
	processLockOnce sync.Once
	processLock     *os.File // kept open: closing it would release the lock
	processLockErr  error
)

func lockPath(pid int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("torchd-%d.lock", pid))
}

// LockProcess takes this process's lock; call it before creating anything in TMPDIR. It is
// idempotent.
func LockProcess() error {
	processLockOnce.Do(func() {
		f, err := os.OpenFile(lockPath(os.Getpid()), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			processLockErr = err
			return
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			processLockErr = err
			return
		}
		processLock = f
	})
	return processLockErr
}

// UnlockProcess removes this process's lock file at a clean exit.
func UnlockProcess() {
	if processLock != nil {
		os.Remove(processLock.Name())
	}
}

// SweepTemp removes what killed torchd processes left in TMPDIR: a process that dies by
// SIGKILL, the OOM killer or a crash inside LibTorch cannot remove its extracted archives,
// so the next start does. Directories of live processes, this one's included, are kept;
// held lists the pids whose lock was still held (live, or not yet finished dying), so that
// the caller can sweep again later.
func SweepTemp() (removed []string, held []int) {
	dirs := []string{os.TempDir()}
	if r := handlerproc.SocketRoot(); r != dirs[0] {
		dirs = append(dirs, r) // handler sockets where TMPDIR's path is too long for them
	}
	byPid := map[int][]string{}
	var locks []int
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			var pid int
			if _, err := fmt.Sscanf(name, "torchd-%d.lock", &pid); err == nil && dir == dirs[0] {
				locks = append(locks, pid)
				continue
			}
			if !e.IsDir() {
				continue
			}
			if legacyHandlerDir.MatchString(name) {
				if p := filepath.Join(dir, name); !listening(filepath.Join(p, ".ts.sock.0")) && os.RemoveAll(p) == nil {
					removed = append(removed, name)
				}
				continue
			}
			m := staleTemp.FindStringSubmatch(name)
			if m == nil {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() {
				continue
			}
			byPid[pid] = append(byPid[pid], filepath.Join(dir, name))
		}
	}
	for pid, paths := range byPid {
		release, dead := ownerGone(pid)
		if !dead {
			held = append(held, pid)
			continue
		}
		for _, p := range paths {
			if os.RemoveAll(p) == nil {
				removed = append(removed, filepath.Base(p))
			}
		}
		release()
	}
	// Lock files of dead processes that left no directory.
	for _, pid := range locks {
		if pid == os.Getpid() || byPid[pid] != nil {
			continue
		}
		if release, dead := ownerGone(pid); dead {
			release()
		}
	}
	return removed, held
}

// ownerGone reports whether pid's torchd is gone, by taking its lock. With dead true,
// release removes the lock file and lets the lock go. A process that has no lock file (a
// torchd from before the lock, or a command that only opens archives) falls back to
// kill(pid, 0).
func ownerGone(pid int) (release func(), dead bool) {
	p := lockPath(pid)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, !alive(pid)
	}
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { os.Remove(p); f.Close() }, true
}

// listening reports whether a process listens on the Unix socket at path (a live worker
// takes the connection into its backlog; a dead one's socket refuses it).
func listening(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// alive reports whether a process exists (EPERM: it exists, owned by another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
