package zootest

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// EditedPackage copies the zoo's digits AOTInductor package (zoo/digits/model.pt2) to a file
// of t's, passing each entry through edit, and appending extra entries (name, bytes) after
// them: the hostile packages of the attack and soak tests.
func EditedPackage(t testing.TB, zoo string, edit func(name string, b []byte) []byte, extra ...[2]string) string {
	t.Helper()
	r, err := zip.OpenReader(filepath.Join(zoo, "digits", "model.pt2"))
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
