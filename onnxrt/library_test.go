package onnxrt_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/onnxrt"
)

// libraryChildEnv makes TestMissingLibrary's re-run of this test binary try to load a model
// with the library setting it was given, in a process that has not loaded ONNX Runtime.
const libraryChildEnv = "TORCHD_TEST_ONNXRT_CHILD"

// TestMissingLibrary starts this test binary with TORCHD_ONNXRUNTIME_LIB naming a missing
// file, a file that is not a library, and a library that is not ONNX Runtime: NewSession
// fails with ErrNoLibrary and a message naming the path and the setting, and the process
// goes on (the child exits normally after reporting). A relative path that exists loads.
func TestMissingLibrary(t *testing.T) {
	if os.Getenv(libraryChildEnv) != "" {
		libraryChild(t)
		return
	}
	dir := t.TempDir()
	text := filepath.Join(dir, "libonnxruntime.so.1.31.1")
	if err := os.WriteFile(text, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	libm := "/lib/x86_64-linux-gnu/libm.so.6"
	for _, tc := range []struct{ lib, message string }{
		// A relative path is the working folder's (the child's is this package's).
		{filepath.Join("..", "bin", onnxrt.LibraryName), "loaded " + filepath.Join(filepath.Dir(mustAbs(t, ".")), "bin", onnxrt.LibraryName)},
		{filepath.Join(dir, "missing.so"), "ONNX Runtime library not found (looked for " + filepath.Join(dir, "missing.so") + "); run `make onnxruntime` or set TORCHD_ONNXRUNTIME_LIB"},
		{text, "cannot load " + text + ": "},
		{libm, "cannot load " + libm + ": the library has no OrtGetApiBase: not ONNX Runtime"},
	} {
		if _, err := os.Stat(tc.lib); err != nil && tc.lib == libm {
			t.Logf("no %s here", libm)
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingLibrary$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), libraryChildEnv+"=1", onnxrt.LibraryEnv+"="+tc.lib)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: the child failed: %v\n%s", tc.lib, err, out)
		}
		if !strings.Contains(string(out), tc.message) {
			t.Errorf("%s: want %q in\n%s", tc.lib, tc.message, out)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func libraryChild(t *testing.T) {
	s, err := onnxrt.NewSession(zoo(t, "mnist", "model.onnx"), onnxrt.Options{})
	if err == nil {
		t.Logf("loaded %s", onnxrt.LibraryPath())
		s.Close()
		return
	}
	if !errors.Is(err, onnxrt.ErrNoLibrary) {
		t.Fatalf("NewSession without the library: %v, want ErrNoLibrary", err)
	}
	if onnxrt.Version() != "" || onnxrt.LibraryPath() != "" {
		t.Fatalf("Version %q and LibraryPath %q without a library", onnxrt.Version(), onnxrt.LibraryPath())
	}
	// A second try fails the same way, and nothing else was affected.
	if _, err2 := onnxrt.NewSession(zoo(t, "mnist", "model.onnx"), onnxrt.Options{}); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("second try: %v", err2)
	}
	t.Logf("error: %v", err)
}
