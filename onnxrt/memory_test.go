package onnxrt_test

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/torchd/torchd/onnxrt"
)

// memoryChildEnv makes TestMemoryLimit's re-run of this test binary set the limit, which is
// once per process, before any session.
const memoryChildEnv = "TORCHD_TEST_ONNXRT_MEMORY_CHILD"

func zerosInput(a, b int64) []onnxrt.Value {
	d := make([]byte, 16)
	binary.LittleEndian.PutUint64(d, uint64(a))
	binary.LittleEndian.PutUint64(d[8:], uint64(b))
	return []onnxrt.Value{{Type: onnxrt.Int64, Shape: []int64{2}, Data: d}}
}

// TestMemoryLimit runs, under a 64 MiB limit, a model that allocates what its caller asks: a
// small tensor comes back, a 1 GiB one is refused with ErrOutOfMemory, and the process's
// other sessions go on answering. (Without a limit, the same 1 GiB run succeeds: only the
// machine bounds it, which is why a test does not try a larger one.)
func TestMemoryLimit(t *testing.T) {
	if os.Getenv(memoryChildEnv) != "" {
		memoryChild(t)
		return
	}
	if err := onnxrt.SetMemoryLimit(0); !errors.Is(err, onnxrt.ErrBadInput) {
		t.Fatalf("a limit of 0: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryLimit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), memoryChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestMemoryLimit") {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func memoryChild(t *testing.T) {
	if err := onnxrt.SetMemoryLimit(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := onnxrt.SetMemoryLimit(64 << 20); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Fatalf("a second limit: %v", err)
	}
	zeros := open(t, zoo(t, "hostile", "zeros.onnx"), onnxrt.Options{})
	out, err := zeros.Run([]string{"shape"}, zerosInput(3, 4), nil)
	if err != nil || len(out[0].Data) != 48 {
		t.Fatalf("3x4 zeros: %v %v", out, err)
	}
	_, err = zeros.Run([]string{"shape"}, zerosInput(1<<14, 1<<14), nil)
	if !errors.Is(err, onnxrt.ErrOutOfMemory) || errors.Is(err, onnxrt.ErrBadInput) {
		t.Fatalf("1 GiB of zeros under a 64 MiB limit: %v, want ErrOutOfMemory", err)
	}
	t.Logf("1 GiB of zeros: %v (code %s)", err, codeOf(err))
	assertNoGoTypeNames(t, err)
	checkServing(t)
	if out, err := zeros.Run([]string{"shape"}, zerosInput(1, 2), nil); err != nil || len(out[0].Data) != 8 {
		t.Fatalf("1x2 zeros after: %v %v", out, err)
	}
}
