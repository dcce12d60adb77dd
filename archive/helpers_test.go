package archive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// zipEntry is one entry of a test zip. Mode 0 means a regular file.
type zipEntry struct {
	name, data string
	mode       fs.FileMode
	store      bool
}

// makeZip builds a zip with archive/zip directly, so tests control every byte
// the way torch-model-archiver (Python's zipfile) or an attacker would.
func makeZip(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: time.Date(2020, 7, 28, 6, 32, 8, 0, time.UTC)}
		if e.store {
			h.Method = zip.Store
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarEntry is one entry of a test tar. Typeflag 0 means a regular file.
type tarEntry struct {
	name, data, link string
	typ              byte
}

func makeTarGz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, ModTime: time.Unix(1600000000, 0)}
		switch e.typ {
		case 0:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeTemp writes data to name in a new temporary directory and returns its path.
func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeTree writes files (slash names) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tsManifest is a MANIFEST.json byte for byte as torch-model-archiver 0.12
// writes it (Python json.dumps, indent 2) for a TorchScript model.
const tsManifest = `{
  "createdOn": "28/07/2020 06:32:08",
  "runtime": "python",
  "model": {
    "modelName": "resnet-18",
    "serializedFile": "resnet18.pt",
    "handler": "image_classifier",
    "modelVersion": "1.0",
    "configFile": "model-config.yaml"
  },
  "archiverVersion": "0.12.0"
}`

// manifestJSON is a compact manifest for tests that vary the model object.
func manifestJSON(model string) string {
	return `{"createdOn":"28/07/2020 06:32:08","runtime":"python","model":` + model + `,"archiverVersion":"0.12.0"}`
}

// fakeTorchScript stands in for a .pt file; archive never looks inside one.
const fakeTorchScript = "PK\x03\x04 not really TorchScript, archive never reads it"

// dirEntries lists what is left in dir, for checks that nothing leaked.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
