package libtorch_test

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core/coretest"
)

// The attacks of issue 50 through registered archives: declared shapes too large to build a
// sample of, and AOTInductor packages whose compiled library was cut short (it killed the
// process with SIGBUS) or whose entries name ../ (LibTorch wrote them outside its
// directory). docs/guide/attacks.md lists them. Each registration fails alone with its
// reason; the rest serve.

// digitsZeros is one digits_tensor request of zeros, in TorchServe's JSON tensor form.
var digitsZeros = `{"data": [` + "0" + strings.Repeat(",0", 783) + `], "shape": [1, 1, 28, 28]}`

// An archive config declaring shape = [-1, 100000, 100000, 100000] (or a product of 40 GB)
// is refused at registration with a 400 naming the key; the models registered before serve on.
func TestHugeDeclaredShape(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	for name, shape := range map[string]string{"overflow": "[-1, 100000, 100000, 100000]", "forty_gb": "[-1, 10000, 1000, 1000]"} {
		// torchd archive refuses to write such a config: it is written over a good one.
		dir := writeDigitsArchive(t, s.scratch, "huge_"+name, "model.pt", "handler = \"tensor\"\n", nil)
		cfg := "handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = " + shape + "\n"
		if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		r := s.manage("POST", "/models?url=huge_"+name+"&initial_workers=1&synchronous=true")
		if r.status != 400 || !strings.Contains(string(r.body), "inputs[0].shape") || !strings.Contains(string(r.body), "holds more than the 1024 MiB a sample may") {
			t.Fatalf("%s: %d %s; want a 400 naming inputs[0].shape", name, r.status, r.body)
		}
		t.Logf("%s: %s", name, r.body)
	}
	if got := tensorData(t, s.do("POST", "/predictions/digits_tensor", "application/json", []byte(digitsZeros))); len(got) != 10 {
		t.Fatalf("digits_tensor after the refusals: %v", got)
	}
}

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

// packageMar writes a .mar of the package pt2 into dir and returns its name there.
func packageMar(t *testing.T, dir, name, pt2 string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte("handler = \"tensor\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: pt2, ConfigFile: cfg, ExportPath: dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(out)
}

// serverTemp points TMPDIR, where archives and packages are extracted, at a directory inside
// one of its own, so that an escape by one level lands in the outer one; it returns both.
func serverTemp(t *testing.T) (tmp, outer string) {
	outer = t.TempDir()
	tmp = filepath.Join(outer, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	return tmp, outer
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A truncated compiled library and ../ entries in a registered package: each registration
// fails alone with a 500 naming the cause, nothing is written outside TMPDIR or left in it,
// and a package loaded before serves on.
func TestHostilePackages(t *testing.T) {
	s := newServer(t, 0)
	tmp, outer := serverTemp(t)
	s.register(t, "url=digits_pt2.mar&initial_workers=1&synchronous=true")
	before := listDir(t, tmp)
	prefix := ""
	cut := editedPackage(t, func(name string, b []byte) []byte {
		prefix, _, _ = strings.Cut(name, "/")
		if strings.HasSuffix(name, ".so") {
			return b[:20<<10] // the 20 kB
		}
		return b
	})
	deep := prefix + "/data/aotinductor/model/"
	cases := []struct {
		name, pt2, want string
	}{
		{"cut", cut, "is truncated"},
		// The .mar is extracted to TMPDIR/torchd-<pid>-model-*/ and LibTorch extracted the
		// package below TMPDIR/aotinductor_*/: five levels up is TMPDIR, six its parent.
		{"escape", editedPackage(t, func(_ string, b []byte) []byte { return b },
			[2]string{deep + "../../../../../escaped_tmp", "x"}, [2]string{deep + "../../../../../../escaped_outer", "x"}), "leaves the package's directory"},
		// The same with a load that would fail anyway (its library cut short).
		{"escape_failing", editedPackage(t, func(name string, b []byte) []byte {
			if strings.HasSuffix(name, ".so") {
				return b[:20<<10]
			}
			return b
		}, [2]string{deep + "../../../../../../escaped_failing", "x"}), "leaves the package's directory"},
	}
	for _, c := range cases {
		url := packageMar(t, s.scratch, "hostile_"+c.name, c.pt2)
		r := s.manage("POST", "/models?url="+url+"&initial_workers=1&synchronous=true")
		errorShape(t, r, 500, "InternalServerException", c.want)
		t.Logf("%s: %s", c.name, r.body)
		if got := listDir(t, outer); len(got) != 1 || got[0] != "tmp" {
			t.Fatalf("%s: TMPDIR's parent holds %v", c.name, got)
		}
		if got := listDir(t, tmp); strings.Join(got, " ") != strings.Join(before, " ") {
			t.Fatalf("%s: TMPDIR holds %v, before it held %v", c.name, got, before)
		}
	}
	if got := tensorData(t, s.do("POST", "/predictions/digits_pt2", "application/json", []byte(digitsZeros))); len(got) != 10 {
		t.Fatalf("the package loaded before: %v", got)
	}
}

// A package's extraction directory (TMPDIR/torchd-<pid>-package-*) goes when the model is
// unregistered; LibTorch makes no aotinductor_* directory of its own. (What a stopped or
// killed process leaves is the daemon's sweep: daemon's TestPackageDirsSwept.)
func TestPackageDirRemovedAtUnregister(t *testing.T) {
	s := newServer(t, 0)
	tmp, _ := serverTemp(t)
	s.register(t, "url=digits_pt2.mar&initial_workers=1&synchronous=true")
	var pkgs []string
	for _, e := range listDir(t, tmp) {
		if strings.Contains(e, "-package-") || strings.HasPrefix(e, "aotinductor_") {
			pkgs = append(pkgs, e)
		}
	}
	if len(pkgs) != 1 || !strings.HasPrefix(pkgs[0], fmt.Sprintf("torchd-%d-package-", os.Getpid())) {
		t.Fatalf("a loaded package: TMPDIR holds %v, want one torchd-<pid>-package-* directory", listDir(t, tmp))
	}
	if r := s.manage("DELETE", "/models/digits_pt2"); r.status != 200 {
		t.Fatalf("unregister: %d %s", r.status, r.body)
	}
	coretest.WaitFor(t, "the unregistered package's directory to go", func() bool { return len(listDir(t, tmp)) == 0 })
}
