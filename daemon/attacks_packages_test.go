package daemon_test

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/torchd/torchd/archive"
)

// The extraction directories AOTInductor packages leave behind a stopped or killed process,
// which the daemon's sweep removes, and the hostile packages soak_hostile_test.go sends.
// The hostile packages' registrations are backends/libtorch's TestHostilePackages.

// editedPackage copies the zoo's digits package to a file of t's, passing each entry through
// edit, and appending extra entries (name, bytes) after them.
func editedPackage(t *testing.T, edit func(name string, b []byte) []byte, extra ...[2]string) string {
	t.Helper()
	r, err := zip.OpenReader(filepath.Join(zooDir, "digits", "model.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(b)
	}
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		add(f.Name, edit(f.Name, b))
	}
	for _, e := range extra {
		add(e[0], []byte(e[1]))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "model.pt2")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// packageMar writes a .mar of the package pt2 into the store's attack/ and returns its URL.
func packageMar(t *testing.T, name, pt2 string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte("handler = \"tensor\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(store, "attack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: pt2, ConfigFile: cfg, ExportPath: dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(out) })
	return "attack/" + filepath.Base(out)
}

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
	if got := pkgDirs(s); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("torchd-%d-package-", s.cmd.Process.Pid)) {
		t.Fatalf("a loaded package: TMPDIR holds %v, want one torchd-<pid>-package-* directory", s.tmpEntries(t))
	}
	s.stop()
	if got := s.tmpEntries(t); len(got) != 0 {
		t.Fatalf("after SIGTERM TMPDIR holds %v", got)
	}

	s = startServerIn(t, tmp)
	s.register(t, "url=pt2/digits_pt2.mar&initial_workers=1&synchronous=true")
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
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
