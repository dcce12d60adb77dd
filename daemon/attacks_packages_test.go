package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The extraction directories AOTInductor packages leave behind a stopped or killed process,
// which the daemon's sweep removes. The hostile packages' registrations are
// backends/libtorch's TestHostilePackages; deploy/soak sends them under load.

// serverTemp makes a server's TMPDIR inside a directory of its own, so that an escape by one
// level lands in the outer one; it returns both.
func serverTemp(t *testing.T) (tmp, outer string) {
	outer = t.TempDir()
	tmp = filepath.Join(outer, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	return tmp, outer
}

// A package's extraction directory (TMPDIR/torchd-<pid>-package-*) goes at SIGTERM, and
// after a kill -9 at the next start; LibTorch makes no aotinductor_* directory of its own.
// (At unregistration: backends/libtorch's TestPackageDirRemovedAtUnregister.)
func TestPackageDirsSwept(t *testing.T) {
	tmp, _ := serverTemp(t)
	pkgDirs := func(s *server) []string {
		var out []string
		for _, e := range s.tmpEntries(t) {
			if strings.Contains(e, "-package-") || strings.HasPrefix(e, "aotinductor_") {
				out = append(out, e)
			}
		}
		return out
	}
	s := startServerIn(t, tmp)
	s.register(t, "url=pt2/digits_pt2.mar&initial_workers=1&synchronous=true")
	if got := pkgDirs(s); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("torchd-%d-package-", s.Cmd.Process.Pid)) {
		t.Fatalf("a loaded package: TMPDIR holds %v, want one torchd-<pid>-package-* directory", s.tmpEntries(t))
	}
	s.stop()
	if got := s.tmpEntries(t); len(got) != 0 {
		t.Fatalf("after SIGTERM TMPDIR holds %v", got)
	}

	s = startServerIn(t, tmp)
	s.register(t, "url=pt2/digits_pt2.mar&initial_workers=1&synchronous=true")
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited
	if got := pkgDirs(s); len(got) != 1 {
		t.Fatalf("after kill -9 TMPDIR holds %v, want the killed process's package directory", s.tmpEntries(t))
	}
	s2 := startServerIn(t, tmp)
	s2.waitHealthy(t)
	waitFor(t, answerBound, "the sweep of the killed process's directories", func() bool { return len(s2.tmpEntries(t)) == 0 })
	if !strings.Contains(s2.Log(), "removed what killed torchd processes left in TMPDIR") {
		t.Error("the sweep was not logged")
	}
}
