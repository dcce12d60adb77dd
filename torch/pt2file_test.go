package torch_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/torch"
)

// The attacks of issue 50 on a package's files: each is refused with an error before
// LibTorch sees the package, nothing is written outside the directory torchd extracts to,
// that directory goes with the package (or the failed load), and the process carries on.

// packageEntry is one entry to add to a package: its name and bytes, and a mode (0: a file).
type packageEntry struct {
	name string
	data []byte
	mode os.FileMode
}

// withEntries copies the package at src with extra entries appended after its own.
func withEntries(t *testing.T, src string, extra ...packageEntry) string {
	t.Helper()
	r, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, f := range r.File {
		if err := w.Copy(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range extra {
		h := &zip.FileHeader{Name: e.name, Method: zip.Store}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		fw, err := w.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(e.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "extra.pt2")
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// packagePrefix is the top-level directory of a package's entries ("model/").
func packagePrefix(t *testing.T, src string) string {
	t.Helper()
	r, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first, _, _ := strings.Cut(r.File[0].Name, "/")
	return first + "/"
}

// isolatedTemp points TMPDIR at an empty directory inside another (so that an escape by one
// level lands in the outer one) and returns both.
func isolatedTemp(t *testing.T) (tmp, outer string) {
	outer = t.TempDir()
	tmp = filepath.Join(outer, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	return tmp, outer
}

// listTree lists every path under dir.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return out
}

// A package whose entries name ../ is refused before anything is extracted, whether its load
// would have succeeded or failed, and nothing lands outside (LibTorch extracted such entries
// as they are named, into its TMPDIR's parent).
func TestPackageTraversalRefused(t *testing.T) {
	good := zoo(t, "digits", "model.pt2")
	prefix := packagePrefix(t, good)
	deep := prefix + "data/aotinductor/model/"
	cases := []struct {
		name  string
		entry string
		opts  []torch.PackageOption
		mode  os.FileMode
	}{
		{"into TMPDIR", deep + "../../../../../escaped_tmp", nil, 0},
		{"into TMPDIR's parent", deep + "../../../../../../escaped_outer", nil, 0},
		{"metadata beside", deep + "../../../../../x_wrapper_metadata.json", nil, 0},
		{"a failed load alike", deep + "../../../../../../escaped_failed", []torch.PackageOption{torch.WithPackageDevice("cuda:0")}, 0},
		{"absolute", "/tmp/escaped_abs", nil, 0},
		{"a symbolic link", deep + "link", nil, os.ModeSymlink | 0o777},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(`{"AOTI_DEVICE_KEY": "cpu"}`)
			if c.mode != 0 {
				data = []byte("/etc")
			}
			pkg := withEntries(t, good, packageEntry{c.entry, data, c.mode})
			tmp, outer := isolatedTemp(t)
			p, err := torch.LoadPackage(pkg, c.opts...)
			if err == nil {
				p.Close()
				t.Fatal("loaded a package with a ../ entry")
			}
			if !errors.Is(err, torch.ErrBadPackage) || !strings.Contains(err.Error(), c.entry) {
				t.Fatalf("error %v, want ErrBadPackage naming %q", err, c.entry)
			}
			if _, err := torch.ReadPackageMetadata(pkg, "model"); err == nil {
				t.Fatal("read the metadata of a package with a ../ entry")
			}
			if got := listTree(t, outer); len(got) != 1 || got[0] != "/tmp" {
				t.Fatalf("after the refusal the temp tree holds %v; want only the empty TMPDIR", got)
			}
			if got := listTree(t, tmp); len(got) != 0 {
				t.Fatalf("TMPDIR holds %v", got)
			}
			t.Log(err)
		})
	}
	if _, err := os.Stat("/tmp/escaped_abs"); err == nil {
		t.Fatal("/tmp/escaped_abs was written")
	}
}

// A package whose compiled library was cut short (a damaged download) is refused from the
// library's ELF headers before dlopen, which mapped the missing pages and died with SIGBUS
// at the first touch. The cuts: the 20 kB, inside the last segment, just before the
// section header table at the end, and to nothing but the ELF header.
func TestTruncatedLibraryRefused(t *testing.T) {
	good := zoo(t, "digits", "model.pt2")
	before := digitsPackage(t)
	var soSize int
	rewritePackage(t, good, func(name string, b []byte) []byte {
		if strings.HasSuffix(name, ".so") {
			soSize = len(b)
		}
		return b
	})
	cuts := map[string]int{"20 kB": 20 << 10, "half": soSize / 2, "last byte": soSize - 1, "header only": 64, "empty": 0}
	// With no section header table (as sstrip leaves a library), only the segments'
	// extents tell a cut library from a whole one.
	const stripped = -1
	cuts["no section headers, 20 kB"] = stripped
	for name, n := range cuts {
		t.Run(name, func(t *testing.T) {
			pkg := rewritePackage(t, good, func(entry string, b []byte) []byte {
				if !strings.HasSuffix(entry, ".so") {
					return b
				}
				if n == stripped {
					b = bytes.Clone(b[:20<<10])
					clear(b[0x28:0x30]) // e_shoff
					clear(b[0x3c:0x40]) // e_shnum, e_shstrndx
					return b
				}
				return b[:n]
			})
			tmp, _ := isolatedTemp(t)
			p, err := torch.LoadPackage(pkg)
			if err == nil {
				p.Close()
				t.Fatalf("loaded a package whose library is cut to %d of %d bytes", n, soSize)
			}
			if !errors.Is(err, torch.ErrBadPackage) || !strings.Contains(err.Error(), "compiled library") {
				t.Fatalf("error %v, want ErrBadPackage about the compiled library", err)
			}
			if got := listTree(t, tmp); len(got) != 0 {
				t.Fatalf("a refused package left %v in TMPDIR", got)
			}
			t.Log(err)
		})
	}
	// A library damaged inside the zip (its bytes no longer match the recorded CRC-32) is
	// refused as it is extracted.
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	r, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.File {
		if strings.HasSuffix(f.Name, ".so") && f.Method == zip.Store {
			off, err := f.DataOffset()
			if err != nil {
				t.Fatal(err)
			}
			raw[off+int64(f.UncompressedSize64)/2] ^= 0xff
		}
	}
	flipped := filepath.Join(t.TempDir(), "flipped.pt2")
	if err := os.WriteFile(flipped, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp, _ := isolatedTemp(t)
	if p, err := torch.LoadPackage(flipped); err == nil {
		p.Close()
		t.Error("loaded a package whose library does not match its CRC-32")
	} else if !strings.Contains(err.Error(), "CRC-32") {
		t.Errorf("flipped byte: %v, want an error about the recorded CRC-32", err)
	}
	if got := listTree(t, tmp); len(got) != 0 {
		t.Errorf("a package refused as it was extracted left %v in TMPDIR", got)
	}
	out, err := before.Forward(mustTensor(t, make([]float32, 784), 1, 1, 28, 28))
	if err != nil {
		t.Fatalf("a package loaded before the bad ones: %v", err)
	}
	torch.CloseValue(out)
}

// A package is extracted into a torchd-<pid>-package-* directory of TMPDIR, which Close
// removes, as a failed load does at once; LibTorch makes no aotinductor_* directory.
func TestPackageDirectoryRemoved(t *testing.T) {
	tmp, _ := isolatedTemp(t)
	p, err := torch.LoadPackage(zoo(t, "digits", "model.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), torch.PackageDirPrefix) || !strings.Contains(entries[0].Name(), "-package-") {
		t.Fatalf("TMPDIR of a loaded package holds %v, want one torchd-<pid>-package-* directory", listTree(t, tmp))
	}
	out, err := p.Forward(mustTensor(t, make([]float32, 784), 1, 1, 28, 28))
	if err != nil {
		t.Fatal(err)
	}
	torch.CloseValue(out)
	p.Close()
	if got := listTree(t, tmp); len(got) != 0 {
		t.Fatalf("after Close TMPDIR holds %v", got)
	}
	// Failed loads: a missing library, the wrong device, bad specs.
	good := zoo(t, "digits", "model.pt2")
	missingLib := rewritePackage(t, good, func(name string, b []byte) []byte {
		if strings.HasSuffix(name, ".so") {
			return bytes.ReplaceAll(b, []byte("libgomp.so.1\x00"), []byte("libgomq.so.1\x00"))
		}
		return b
	})
	for _, c := range []struct {
		path string
		opts []torch.PackageOption
	}{{missingLib, nil}, {good, []torch.PackageOption{torch.WithPackageDevice("cuda:7")}}, {editMetadata(t, good, map[string]string{"AOTI_DEVICE_KEY": "cuda"}), nil}} {
		if p, err := torch.LoadPackage(c.path, c.opts...); err == nil {
			p.Close()
			t.Fatalf("%s loaded", c.path)
		}
		if got := listTree(t, tmp); len(got) != 0 {
			t.Fatalf("a failed load left %v in TMPDIR", got)
		}
	}
}
