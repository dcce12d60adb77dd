package torch_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// zoo returns the path of a file that `make models` writes under models/out.
func zoo(t testing.TB, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{"..", "models", "out"}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	return p
}

func readNpy(t testing.TB, path string) npy.Array {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return a
}

// npyTensor wraps an .npy file's bytes as a tensor, without copying.
func npyTensor(t testing.TB, path string) *torch.Tensor {
	t.Helper()
	a := readNpy(t, path)
	dt, err := torch.ParseDType(a.DType)
	if err != nil {
		t.Fatal(err)
	}
	x, err := torch.FromBytes(dt, a.Data, a.Shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// testDevice is where the reference tests run: TORCHD_TEST_DEVICE (e.g. cuda:0), else cpu.
func testDevice() string {
	if d := os.Getenv("TORCHD_TEST_DEVICE"); d != "" {
		return d
	}
	return "cpu"
}

func float32s(t testing.TB, v any) []float32 {
	t.Helper()
	x, ok := v.(*torch.Tensor)
	if !ok {
		t.Fatalf("got %T, want *torch.Tensor", v)
	}
	x, err := x.ToCPU()
	if err != nil {
		t.Fatal(err)
	}
	d, err := torch.Data[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// checkReference runs model on ref_input.npy and compares with ref_output.npy.
func checkReference(t *testing.T, name string, tol float64, opts ...torch.LoadOption) {
	m, err := torch.Load(zoo(t, name, "model.pt"), append(opts, torch.WithDevice(testDevice()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := npyTensor(t, zoo(t, name, "ref_input.npy"))
	want := readNpy(t, zoo(t, name, "ref_output.npy"))
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	got := float32s(t, out)
	if !slices.Equal(out.(*torch.Tensor).Shape(), want.Shape) {
		t.Fatalf("shape %v, want %v", out.(*torch.Tensor).Shape(), want.Shape)
	}
	wantF := npyFloat32s(want)
	d := maxAbsDiff(got, wantF)
	t.Logf("%s: max |go - python| = %.3g over %d values", name, d, len(got))
	if d > tol {
		t.Fatalf("%s: max abs difference %.3g > %g", name, d, tol)
	}
}

func npyFloat32s(a npy.Array) []float32 {
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		u := uint32(a.Data[4*i]) | uint32(a.Data[4*i+1])<<8 | uint32(a.Data[4*i+2])<<16 | uint32(a.Data[4*i+3])<<24
		out[i] = math.Float32frombits(u)
	}
	return out
}

func TestResNet18MatchesPython(t *testing.T) {
	checkReference(t, "resnet18", tolerance.Kernels)
}

func TestDigitsMatchesPython(t *testing.T) {
	checkReference(t, "digits", tolerance.Kernels)
}

// Files saved by PyTorch 2.x that call aten::scaled_dot_product_attention, which LibTorch
// 1.13 refused ("Unknown builtin op"): models/attention.py.
func TestAttentionFromPyTorch2MatchesPython(t *testing.T) {
	for _, name := range []string{"sdpa", "encoder", "mha"} {
		t.Run(name, func(t *testing.T) { checkReference(t, filepath.Join("attention", name), tolerance.Kernels) })
	}
}

// Freezing folds batch norm into convolutions, which reorders float arithmetic: the
// tolerance is looser, and stated.
func TestResNet18Frozen(t *testing.T) {
	t.Run("freeze", func(t *testing.T) { checkReference(t, "resnet18", 1e-4, torch.WithFreeze()) })
	t.Run("optimize", func(t *testing.T) { checkReference(t, "resnet18", 1e-4, torch.WithOptimize()) })
}

// The digits held-out set through the binding reaches the accuracy that Python measured.
func TestDigitsHeldOutAccuracy(t *testing.T) {
	m, err := torch.Load(zoo(t, "digits", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := npyTensor(t, zoo(t, "digits", "heldout.npy"))
	labels := readNpy(t, zoo(t, "digits", "heldout_labels.npy"))
	out, err := m.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	logits := float32s(t, out)
	n := len(labels.Data) / 8
	correct := 0
	for i := range n {
		row := logits[i*10 : i*10+10]
		best := 0
		for k := range row {
			if row[k] > row[best] {
				best = k
			}
		}
		if int64(labels.Data[8*i]) == int64(best) {
			correct++
		}
	}
	acc := float64(correct) / float64(n)
	t.Logf("held-out accuracy %.4f over %d digits", acc, n)
	if acc < 0.97 {
		t.Fatalf("held-out accuracy %.4f < 0.97", acc)
	}
}

func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		t.Fatal(err)
	}
	return rss * int64(os.Getpagesize())
}

// Forwards must not grow the process: every native object is freed. After a first block of
// 10,000 forwards (heaps settling, bounded at 16 MiB), a second block may add at most 4 MiB;
// leaking one output per call (LibTorch's tensor and storage, about 0.5 KiB) would exceed it.
func TestForwardDoesNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m, err := torch.Load(zoo(t, "digits", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data := make([]float32, 4*28*28)
	run := func(n int) {
		for range n {
			x, _ := torch.NewTensor(data, 4, 1, 28, 28)
			out, err := m.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			torch.CloseValue(out)
		}
	}
	run(1000) // warm-up: allocator pools and the profiling executor settle
	runtime.GC()
	start := rssBytes(t)
	run(10000)
	runtime.GC()
	mid := rssBytes(t)
	run(10000)
	runtime.GC()
	end := rssBytes(t)
	t.Logf("RSS %d KiB after warm-up, %d KiB after 10,000 forwards (%+d), %d KiB after 10,000 more (%+d)",
		start>>10, mid>>10, (mid-start)>>10, end>>10, (end-mid)>>10)
	// The first block lets the heaps settle; the second one tells a leak from that.
	if mid-start > 16<<20 || end-mid > 4<<20 {
		t.Fatalf("RSS grew by %d KiB, then %d KiB, over two blocks of 10,000 forwards", (mid-start)>>10, (end-mid)>>10)
	}
}
