package torch

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A package that inflates far past its own size (a zip bomb) stops extracting at the bound,
// and leaves nothing.
func TestPackageZipBomb(t *testing.T) {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	fw, err := w.Create("p/data/aotinductor/model/weights.bin") // deflated
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(make([]byte, 16<<20))
	w.Close()
	file := filepath.Join(t.TempDir(), "bomb.pt2")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	old := packageSlack
	packageSlack = 0 // the bound is then 16 times the package's size: a few hundred KB
	defer func() { packageSlack = old }()
	zr, err := openPackage(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	if _, err := extractPackage(file, zr); err == nil || !strings.Contains(err.Error(), "zip bomb") {
		t.Fatalf("%d bytes inflating to 16 MiB: %v, want the bound", buf.Len(), err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("TMPDIR holds %v", left)
	}
}
