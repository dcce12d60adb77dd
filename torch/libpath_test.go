package torch_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// decoyChildEnv makes TestPackageIgnoresLibraryPath's re-run of this test binary load and
// run the digits package, which is what it checks from outside.
const decoyChildEnv = "TORCHD_TEST_DECOY_CHILD"

// decoyLibraries writes, into a new directory, a libtorch.so, libtorch_cpu.so, libc10.so and
// libgomp.so.1 that abort the process as soon as they are loaded: the names an AOTInductor
// package's compiled library NEEDs without a path.
func decoyLibraries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "decoy.c")
	code := "#include <stdio.h>\n#include <stdlib.h>\n" +
		"__attribute__((constructor)) static void decoy(void) { fputs(\"decoy libtorch loaded\\n\", stderr); abort(); }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"libtorch.so", "libtorch_cpu.so", "libc10.so", "libgomp.so.1"} {
		out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(dir, name), "-Wl,-soname,"+name, src).CombinedOutput()
		if err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
	}
	return dir
}

// TestPackageIgnoresLibraryPath runs a package in a process whose LD_LIBRARY_PATH starts with
// a directory of decoy LibTorch libraries (each aborts when loaded): the package's compiled
// library still binds to torchd's LibTorch, and its outputs equal eager PyTorch's. With the
// decoys preloaded instead, the same process dies, which shows the decoys would be noticed.
func TestPackageIgnoresLibraryPath(t *testing.T) {
	if os.Getenv(decoyChildEnv) != "" {
		decoyChild(t)
		return
	}
	pkg, err := filepath.Abs(zoo(t, "digits", "model.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	dir := decoyLibraries(t)
	run := func(extra ...string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPackageIgnoresLibraryPath$", "-test.count=1", "-test.v")
		cmd.Dir, _ = os.Getwd()
		cmd.Env = append(os.Environ(), decoyChildEnv+"="+pkg)
		cmd.Env = append(cmd.Env, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("LD_LIBRARY_PATH=" + dir + ":" + os.Getenv("LD_LIBRARY_PATH"))
	if err != nil || !strings.Contains(out, "decoy child: outputs match") {
		t.Fatalf("with decoys on LD_LIBRARY_PATH: %v\n%s", err, out)
	}
	out, err = run("LD_PRELOAD=" + filepath.Join(dir, "libtorch.so"))
	if err == nil || !strings.Contains(out, "decoy libtorch loaded") {
		t.Fatalf("with a decoy preloaded: %v, want the process to abort\n%s", err, out)
	}
}

// decoyChild loads the package named by decoyChildEnv and checks one batch against eager
// PyTorch's output.
func decoyChild(t *testing.T) {
	path := os.Getenv(decoyChildEnv)
	p, err := torch.LoadPackage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dir := filepath.Dir(path)
	in := readNpy(t, filepath.Join(dir, "pt2_ref_input.npy"))
	row := len(in.Data) / int(in.Shape[0])
	x, err := torch.FromBytes(torch.Float32, in.Data[:7*row], append([]int64{7}, in.Shape[1:]...)...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	want := npyFloat32s(readNpy(t, filepath.Join(dir, "pt2_ref_output_b7.npy")))
	if d := maxAbsDiff(float32s(t, out), want); d > tolerance.Kernels {
		t.Fatalf("max |diff| %g from eager PyTorch", d)
	}
	fmt.Println("decoy child: outputs match")
}
