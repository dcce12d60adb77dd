package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
)

// staleTemp matches the directories torchd creates in TMPDIR: extracted archives and
// downloads, named with the pid of the process that made them.
var staleTemp = regexp.MustCompile(`^torchd-(\d+)-(model|download)-`)

// SweepTemp removes what killed torchd processes left in TMPDIR: a process that dies by
// SIGKILL, the OOM killer or a crash inside LibTorch cannot remove its extracted archives,
// so the next start does. Directories of live processes, this one's included, are kept.
func SweepTemp() (removed []string) {
	dir := os.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		m := staleTemp.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		if os.RemoveAll(filepath.Join(dir, e.Name())) == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed
}

// alive reports whether a process exists (EPERM: it exists, owned by another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
