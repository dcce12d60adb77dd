package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// venvPython is the project venv's interpreter, which make test gives TorchServe's worker
// and archiver (make handler-runtime).
func venvPython(t testing.TB) string {
	p, err := filepath.Abs("../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, "-c", "import ts, model_archiver").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import TorchServe (make handler-runtime): %v\n%s", p, err, out)
	}
	return p
}

// archiveTiny packs handlerproc's test handler and eager model with TorchServe's own
// torch-model-archiver, as a TorchServe user does, into the e2e store as NAME.mar, with
// handler as --handler.
func archiveTiny(t testing.TB, py, name, handler string) {
	t.Helper()
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../handlerproc/testdata/tiny")); err != nil {
		t.Fatal(err)
	}
	steps := [][]string{
		{py, "-c", "import torch, model; torch.manual_seed(0); torch.save(model.TinyNet().state_dict(), 'tiny.pt')"},
		{filepath.Join(filepath.Dir(py), "torch-model-archiver"), "--model-name", name, "--version", "1.0", "--model-file", "model.py",
			"--serialized-file", "tiny.pt", "--handler", handler, "--extra-files", "service.py,handler.py,broken.py", "--export-path", store, "--force"},
	}
	for _, args := range steps {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { os.Remove(filepath.Join(store, name+".mar")) })
}
