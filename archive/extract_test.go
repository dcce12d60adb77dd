package archive

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// validMAR is a minimal archive torchd serves.
func validMAR(t testing.TB) []byte {
	return makeZip(t,
		zipEntry{name: "model.pt", data: fakeTorchScript},
		zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"tensor","modelVersion":"1.0"}`)})
}

// lyingZip holds one file whose header claims declared bytes but whose data
// inflates to actual bytes.
func lyingZip(t testing.TB, declared uint64, actual int) []byte {
	t.Helper()
	data := make([]byte, actual)
	var c bytes.Buffer
	fw, _ := flate.NewWriter(&c, flate.BestCompression)
	fw.Write(data)
	fw.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "model.pt", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(data),
		CompressedSize64: uint64(c.Len()), UncompressedSize64: declared})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(c.Bytes())
	zw.Close()
	return buf.Bytes()
}

// Every malicious or broken archive is refused with its own error, and
// nothing of it stays on disk.
func TestOpenMalicious(t *testing.T) {
	zeros := strings.Repeat("\x00", 10<<20) // deflates to about 10 KiB
	manifest := manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"tensor"}`)
	small := Limits{MaxTotalBytes: 1 << 20, MaxFileBytes: 512 << 10, MaxFiles: 10}
	mar := validMAR(t)
	corruptMAR := bytes.Clone(makeZip(t, zipEntry{name: "model.pt", data: strings.Repeat("torchscript weights ", 5000)}))
	for i := 60; i < 200; i++ {
		corruptMAR[i] ^= 0x55 // inside model.pt's deflated data
	}
	tgz := makeTarGz(t, tarEntry{name: "m/model.pt", data: fakeTorchScript}, tarEntry{name: "m/" + ManifestPath, data: manifest})

	for _, tc := range []struct {
		name   string
		file   string // archive file name; the extension picks the reader
		data   []byte
		limits Limits
		want   error
		entry  string // the refused entry, for *EntryError
	}{
		{name: "zip-slip", file: "m.mar", data: makeZip(t, zipEntry{name: "../../evil.sh", data: "x"}), want: ErrPathTraversal, entry: "../../evil.sh"},
		{name: "zip-slip inside a path", file: "m.mar", data: makeZip(t, zipEntry{name: "a/../../evil.sh", data: "x"}), want: ErrPathTraversal, entry: "a/../../evil.sh"},
		{name: "zip-slip with backslashes", file: "m.mar", data: makeZip(t, zipEntry{name: `..\evil.sh`, data: "x"}), want: ErrPathTraversal, entry: `..\evil.sh`},
		{name: "tar-slip", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: "m/../../evil.sh", data: "x"}), want: ErrPathTraversal, entry: "m/../../evil.sh"},
		{name: "absolute path zip", file: "m.mar", data: makeZip(t, zipEntry{name: "/etc/cron.d/evil", data: "x"}), want: ErrAbsolutePath, entry: "/etc/cron.d/evil"},
		{name: "absolute path tar", file: "m.tgz", data: makeTarGz(t, tarEntry{name: "/etc/cron.d/evil", data: "x"}), want: ErrAbsolutePath, entry: "/etc/cron.d/evil"},
		{name: "windows drive path", file: "m.mar", data: makeZip(t, zipEntry{name: `C:\Windows\evil.dll`, data: "x"}), want: ErrAbsolutePath, entry: `C:\Windows\evil.dll`},
		{name: "NUL in name", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt\x00.txt", data: "x"}), want: ErrUnsafePath, entry: "model.pt\x00.txt"},
		{name: "symlink escape tar", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/model.pt", typ: '2', link: "../../../../etc/passwd"}), want: ErrLinkEscape, entry: "m/model.pt"},
		{name: "absolute symlink tar", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/model.pt", typ: '2', link: "/etc/passwd"}), want: ErrLinkEscape, entry: "m/model.pt"},
		{name: "symlink chain escape", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "here", typ: '2', link: "."}, tarEntry{name: "up", typ: '2', link: "here/.."}), want: ErrLinkEscape, entry: "up"},
		{name: "write through symlink", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/sub/", typ: '5'}, tarEntry{name: "m/d", typ: '2', link: "sub"}, tarEntry{name: "m/d/x", data: "x"}), want: ErrLinkEscape, entry: "m/d/x"},
		{name: "hardlink escape", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/model.pt", typ: '1', link: "/etc/shadow"}), want: ErrLinkEscape, entry: "m/model.pt"},
		{name: "hardlink to no earlier file", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/model.pt", typ: '1', link: "m/later.pt"}, tarEntry{name: "m/later.pt", data: "x"}), want: ErrLinkEscape, entry: "m/model.pt"},
		{name: "symlink escape zip", file: "m.mar", data: makeZip(t,
			zipEntry{name: "model.pt", data: "../../../etc/passwd", mode: fs.ModeSymlink | 0o777}), want: ErrLinkEscape, entry: "model.pt"},
		{name: "device node", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: "m/null", typ: '3'}), want: ErrUnsupportedEntry, entry: "m/null"},
		{name: "fifo", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: "m/fifo", typ: '6'}), want: ErrUnsupportedEntry, entry: "m/fifo"},
		{name: "duplicate zip names", file: "m.mar", data: makeZip(t,
			zipEntry{name: "model.pt", data: "a"}, zipEntry{name: "model.pt", data: "b"}), want: ErrDuplicateEntry, entry: "model.pt"},
		{name: "duplicate after cleaning", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "m/model.pt", data: "a"}, tarEntry{name: "m//./model.pt", data: "b"}), want: ErrDuplicateEntry, entry: "m//./model.pt"},
		{name: "file then directory of that name", file: "m.mar", data: makeZip(t,
			zipEntry{name: "model.pt", data: "a"}, zipEntry{name: "model.pt/x", data: "b"}), want: ErrDuplicateEntry, entry: "model.pt/x"},
		{name: "bomb zip", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt", data: zeros}), limits: small, want: ErrFileTooLarge, entry: "model.pt"},
		{name: "bomb zip with lying header", file: "m.mar", data: lyingZip(t, 100, 10<<20), limits: small, want: ErrCorrupt, entry: "model.pt"},
		{name: "bomb tar.gz", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: "m/model.pt", data: zeros}), limits: small, want: ErrFileTooLarge, entry: "m/model.pt"},
		{name: "total size zip", file: "m.mar", data: makeZip(t,
			zipEntry{name: "a", data: zeros[:400<<10]}, zipEntry{name: "b", data: zeros[:400<<10]}, zipEntry{name: "c", data: zeros[:400<<10]}),
			limits: small, want: ErrArchiveTooLarge, entry: "c"},
		{name: "total size tar.gz", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "a", data: zeros[:400<<10]}, tarEntry{name: "b", data: zeros[:400<<10]}, tarEntry{name: "c", data: zeros[:400<<10]}),
			limits: small, want: ErrArchiveTooLarge, entry: "c"},
		{name: "too many zip entries", file: "m.mar", data: makeZip(t, make([]zipEntry, 11)...), limits: small, want: ErrTooManyFiles},
		{name: "too many tar entries", file: "m.tar.gz", data: makeTarGz(t,
			tarEntry{name: "0"}, tarEntry{name: "1"}, tarEntry{name: "2"}, tarEntry{name: "3"}, tarEntry{name: "4"}, tarEntry{name: "5"},
			tarEntry{name: "6"}, tarEntry{name: "7"}, tarEntry{name: "8"}, tarEntry{name: "9"}, tarEntry{name: "10"}), limits: small, want: ErrTooManyFiles, entry: "10"},
		{name: "truncated zip", file: "m.mar", data: mar[:len(mar)/2], want: ErrCorrupt},
		{name: "corrupt zip data", file: "m.mar", data: corruptMAR, want: ErrCorrupt, entry: "model.pt"},
		{name: "truncated tar.gz", file: "m.tar.gz", data: tgz[:len(tgz)-30], want: ErrCorrupt},
		{name: "truncated gzip trailer", file: "m.tar.gz", data: tgz[:len(tgz)-4], want: ErrCorrupt},
		{name: "not gzip", file: "m.tar.gz", data: []byte("this is not a gzip stream"), want: ErrCorrupt},
		{name: "missing manifest in .mar", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt"}), want: ErrMissingManifest},
		{name: "missing manifest and config in .tar.gz", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: "m/model.pt"}), want: ErrMissingManifest},
		{name: "manifest alone in a .tar.gz", file: "m.tar.gz", data: makeTarGz(t, tarEntry{name: ManifestPath, data: manifest}), want: ErrMissingFile},
		{name: "manifest names a missing file", file: "m.mar", data: makeZip(t, zipEntry{name: ManifestPath, data: manifest}), want: ErrMissingFile},
		{name: "manifest names a missing config", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt"},
			zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"tensor","configFile":"model-config.yaml"}`)}), want: ErrMissingFile},
		{name: "manifest names a file outside", file: "m.mar", data: makeZip(t,
			zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"../../model.pt","handler":"tensor"}`)}), want: ErrPathTraversal},
		{name: "manifest not JSON", file: "m.mar", data: makeZip(t, zipEntry{name: ManifestPath, data: "{not json"}), want: ErrInvalidConfig},
		{name: "manifest wrong type", file: "m.mar", data: makeZip(t, zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":5}`)}), want: ErrInvalidConfig},
		{name: "wrong type in TOML", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt"},
			zipEntry{name: ConfigTOML, data: `batch_size = "8"`}, zipEntry{name: ManifestPath, data: manifest}), want: ErrInvalidConfig},
		{name: "unknown key in TOML", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt"},
			zipEntry{name: ConfigTOML, data: `batchsize = 8`}, zipEntry{name: ManifestPath, data: manifest}), want: ErrInvalidConfig},
		{name: "bad labels", file: "m.mar", data: makeZip(t, zipEntry{name: "model.pt"}, zipEntry{name: LabelsFile, data: `{"0": 5}`},
			zipEntry{name: ManifestPath, data: manifest}), want: ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			p := writeTemp(t, tc.file, tc.data)
			m, err := Open(p, WithTempDir(tmp), WithLimits(tc.limits))
			if err == nil {
				m.Close()
				t.Fatalf("Open succeeded; want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v; want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), p+": ") {
				t.Errorf("err %q does not name the archive", err)
			}
			var ee *EntryError
			if tc.entry != "" && (!errors.As(err, &ee) || ee.Entry != tc.entry) {
				t.Errorf("err = %#v; want an *EntryError for %q", err, tc.entry)
			}
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Errorf("a failed Open left %q behind", left)
			}
		})
	}
}

// Links that stay inside the archive are fine: a symlink is kept, a hard
// link becomes a copy.
func TestOpenTarLinksInside(t *testing.T) {
	manifest := manifestJSON(`{"modelName":"m","serializedFile":"alias.pt","handler":"tensor"}`)
	tgz := makeTarGz(t,
		tarEntry{name: "m/weights/", typ: '5'},
		tarEntry{name: "m/weights/model.pt", data: fakeTorchScript},
		tarEntry{name: "m/alias.pt", typ: '2', link: "weights/model.pt"},
		tarEntry{name: "m/copy.pt", typ: '1', link: "m/weights/model.pt"},
		tarEntry{name: "m/" + ManifestPath, data: manifest})
	m, err := Open(writeTemp(t, "m.tar.gz", tgz))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, name := range []string{"alias.pt", "copy.pt", "weights/model.pt"} {
		p, err := m.Path(name)
		if err != nil {
			t.Fatal(err)
		}
		if data, err := os.ReadFile(p); err != nil || string(data) != fakeTorchScript {
			t.Errorf("%s: %q, %v", name, data, err)
		}
	}
	if fi, err := os.Lstat(m.SerializedPath()); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("alias.pt is not a symlink: %v", err)
	}
	if fi, err := os.Lstat(m.Dir + "/copy.pt"); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("copy.pt is not a regular file: %v", err)
	}
}

// A negative limit turns it off.
func TestLimitsNegativeMeansNone(t *testing.T) {
	data := makeZip(t, zipEntry{name: "model.pt", data: strings.Repeat("x", 2<<20)},
		zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"tensor"}`)})
	m, err := Open(writeTemp(t, "m.mar", data), WithLimits(Limits{MaxTotalBytes: -1, MaxFileBytes: -1, MaxFiles: -1}))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	_, err = Open(writeTemp(t, "m.mar", data), WithLimits(Limits{MaxFileBytes: 1 << 20}))
	if !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("err = %v", err)
	}
}

func TestEntryName(t *testing.T) {
	for raw, want := range map[string]string{
		"model.pt":        "model.pt",
		"./model.pt":      "model.pt",
		"a//b/./c":        "a/b/c",
		"dir/":            "dir",
		"./":              "",
		`MAR-INF\x.json`:  "MAR-INF/x.json",
		"..foo/bar..":     "..foo/bar..", // dots inside a name are fine
		"C:relative-name": "!" + ErrAbsolutePath.Error(),
		"..":              "!" + ErrPathTraversal.Error(),
		"":                "!" + ErrUnsafePath.Error(),
	} {
		got, err := entryName(raw)
		if err != nil {
			got = "!" + err.Error()
		}
		if got != want {
			t.Errorf("entryName(%q) = %q, want %q", raw, got, want)
		}
	}
}
