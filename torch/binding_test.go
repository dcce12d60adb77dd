package torch_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/torch"
)

func loadMultiIO(t testing.TB) *torch.Module {
	t.Helper()
	m, err := torch.Load(zoo(t, "multiio", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func mustTensor[T torch.Element](t testing.TB, data []T, shape ...int64) *torch.Tensor {
	t.Helper()
	x, err := torch.NewTensor(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// An output that is the input itself, or a view of it, must not point into Go memory that
// is unpinned once the call returns: the library clones it.
func TestOutputsNeverAliasInputs(t *testing.T) {
	m := loadMultiIO(t)
	data := []float32{1, 2, 3, 4, 5, 6}
	for _, method := range []string{"identity", "view"} {
		x := mustTensor(t, data, 2, 3)
		out, err := m.Run(method, x)
		if err != nil {
			t.Fatal(err)
		}
		got := float32s(t, out)
		data[0], data[3] = 100, 100
		want := []float32{1, 2, 3, 4, 5, 6}
		if method == "view" {
			want = want[:3]
		}
		if maxAbsDiff(got, want) != 0 {
			t.Errorf("%s: output changed with the input: %v", method, got)
		}
		data[0], data[3] = 1, 4
		torch.CloseValue(out)
	}
}

func TestNonContiguousOutput(t *testing.T) {
	m := loadMultiIO(t)
	out, err := m.Run("transpose", mustTensor(t, []float32{1, 2, 3, 4, 5, 6}, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	if s := out.(*torch.Tensor).Shape(); !slices.Equal(s, []int64{3, 2}) {
		t.Fatalf("shape %v", s)
	}
	if got := float32s(t, out); maxAbsDiff(got, []float32{1, 4, 2, 5, 3, 6}) != 0 {
		t.Fatalf("transpose = %v", got)
	}
}

// Every supported dtype goes in without conversion and comes back as itself.
func TestDTypes(t *testing.T) {
	m := loadMultiIO(t)
	check := func(name string, in *torch.Tensor, want torch.DType, verify func(*torch.Tensor) bool) {
		t.Helper()
		out, err := m.Run("double_it", in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer torch.CloseValue(out)
		o := out.(*torch.Tensor)
		if o.DType() != want || !verify(o) {
			t.Errorf("%s: got %v %v", name, o.DType(), o.Bytes())
		}
	}
	eq := func(o *torch.Tensor, want []byte) bool { return string(o.Bytes()) == string(want) }
	check("float32", mustTensor(t, []float32{1.5, -2}), torch.Float32, func(o *torch.Tensor) bool {
		d, _ := torch.Data[float32](o)
		return d[0] == 3 && d[1] == -4
	})
	check("float64", mustTensor(t, []float64{1.5, -2}), torch.Float64, func(o *torch.Tensor) bool {
		d, _ := torch.Data[float64](o)
		return d[0] == 3 && d[1] == -4
	})
	check("int64", mustTensor(t, []int64{7, -9}), torch.Int64, func(o *torch.Tensor) bool {
		d, _ := torch.Data[int64](o)
		return d[0] == 14 && d[1] == -18
	})
	check("int32", mustTensor(t, []int32{7, -9}), torch.Int32, func(o *torch.Tensor) bool {
		d, _ := torch.Data[int32](o)
		return d[0] == 14 && d[1] == -18
	})
	check("uint8", mustTensor(t, []uint8{7, 200}), torch.Uint8, func(o *torch.Tensor) bool { return eq(o, []byte{14, 144}) })
	check("int8", mustTensor(t, []int8{7, -9}), torch.Int8, func(o *torch.Tensor) bool {
		d, _ := torch.Data[int8](o)
		return d[0] == 14 && d[1] == -18
	})
	// 1.5 is 0x3E00 in float16 and 0x3FC0 in bfloat16; doubled, 3.0 is 0x4200 and 0x4040.
	check("float16", mustTensor(t, []torch.Half{0x3E00}), torch.Float16, func(o *torch.Tensor) bool {
		d, _ := torch.Data[torch.Half](o)
		return d[0] == 0x4200
	})
	check("bfloat16", mustTensor(t, []torch.BHalf{0x3FC0}), torch.BFloat16, func(o *torch.Tensor) bool {
		d, _ := torch.Data[torch.BHalf](o)
		return d[0] == 0x4040
	})
	// x*2 on bool promotes to int64 in TorchScript; the point is that bool goes in intact.
	out, err := m.Run("cast", mustTensor(t, []bool{true, false, true}), int64(4))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := torch.Data[int64](out.(*torch.Tensor)); len(d) != 3 || d[0] != 1 || d[1] != 0 || d[2] != 1 {
		t.Errorf("bool → int64 = %v", d)
	}
	torch.CloseValue(out)

	// cast covers every output dtype.
	codes := []torch.DType{torch.Float32, torch.Float16, torch.BFloat16, torch.Float64, torch.Int64, torch.Int32, torch.Uint8, torch.Int8, torch.Bool}
	for code, want := range codes {
		out, err := m.Run("cast", mustTensor(t, []float32{1, 0, 2}), int64(code))
		if err != nil {
			t.Fatalf("cast %v: %v", want, err)
		}
		o := out.(*torch.Tensor)
		if o.DType() != want || len(o.Bytes()) != 3*want.Size() {
			t.Errorf("cast to %v: got %v with %d bytes", want, o.DType(), len(o.Bytes()))
		}
		torch.CloseValue(out)
	}
}

func TestFromBytesUnaligned(t *testing.T) {
	m := loadMultiIO(t)
	buf := make([]byte, 13)
	b := buf[1:13]                                                     // misaligned for float32
	copy(b, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40}) // 1, 2, 3
	x, err := torch.FromBytes(torch.Float32, b, 3)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Run("double_it", x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	if got := float32s(t, out); maxAbsDiff(got, []float32{2, 4, 6}) != 0 {
		t.Fatalf("got %v", got)
	}
}

// Every error path returns an error carrying LibTorch's message; nothing panics.
func TestErrors(t *testing.T) {
	m := loadMultiIO(t)
	r18, err := torch.Load(zoo(t, "resnet18", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer r18.Close()
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.pt")
	os.WriteFile(corrupt, []byte("this is not a zip archive, let alone TorchScript"), 0o644)
	truncated := filepath.Join(dir, "truncated.pt")
	whole, _ := os.ReadFile(zoo(t, "multiio", "model.pt"))
	os.WriteFile(truncated, whole[:len(whole)/2], 0o644)

	img := make([]float32, 3*224*224)
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"wrong arity", func() error { _, err := r18.Forward(); return err }, "argument"},
		{"too many args", func() error { _, err := m.Run("identity", mustTensor(t, img[:3]), mustTensor(t, img[:3])); return err }, "argument"},
		{"wrong argument type", func() error { _, err := m.Run("identity", "a string"); return err }, "Expected a value of type 'Tensor'"},
		{"wrong dtype", func() error {
			_, err := r18.Forward(mustTensor(t, make([]int64, 3*224*224), 1, 3, 224, 224))
			return err
		}, ""},
		{"wrong shape", func() error { _, err := r18.Forward(mustTensor(t, img[:3*224], 1, 3, 224)); return err }, ""},
		{"wrong channels", func() error { _, err := r18.Forward(mustTensor(t, img[:224*224], 1, 1, 224, 224)); return err }, "channels"},
		{"unknown method", func() error { _, err := m.Run("nope"); return err }, "has no method 'nope'"},
		{"script raises", func() error { _, err := m.Run("check", mustTensor(t, []float32{-1, -2})); return err }, "negative input"},
		{"mixed list", func() error { _, err := m.Run("identity", []any{int64(1), "x"}); return err }, "mixes element types"},
		{"unsupported Go type", func() error { _, err := m.Run("identity", struct{}{}); return err }, "unsupported input type"},
		{"nil tensor", func() error { _, err := m.Run("identity", (*torch.Tensor)(nil)); return err }, "nil *Tensor"},
		{"missing file", func() error { _, err := torch.Load(filepath.Join(dir, "absent.pt")); return err }, "no such file"},
		{"corrupt file", func() error { _, err := torch.Load(corrupt); return err }, ""},
		{"truncated file", func() error { _, err := torch.Load(truncated); return err }, ""},
		{"bad device", func() error {
			_, err := torch.Load(zoo(t, "multiio", "model.pt"), torch.WithDevice("tpu:0"))
			return err
		}, ""},
		{"shape mismatch", func() error { _, err := torch.NewTensor([]float32{1, 2, 3}, 2, 2); return err }, "needs 4 elements"},
		{"negative shape", func() error { _, err := torch.NewTensor([]float32{}, -1); return err }, "negative"},
		{"bytes mismatch", func() error { _, err := torch.FromBytes(torch.Float32, make([]byte, 7), 2); return err }, "needs 8 bytes"},
	}
	if !torch.CUDAAvailable() {
		cases = append(cases, struct {
			name string
			run  func() error
			want string
		}{"cuda on a CPU build", func() error {
			_, err := torch.Load(zoo(t, "multiio", "model.pt"), torch.WithDevice("cuda:0"))
			return err
		}, "CUDA is not available"})
	}
	for _, c := range cases {
		err := c.run()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), "frame #") {
			t.Errorf("%s: error carries a C++ backtrace: %q", c.name, err)
		}
		t.Logf("%s: %v", c.name, firstLine(err.Error()))
	}
	// The module still works after every failure above.
	out, err := m.Run("check", mustTensor(t, []float32{1, 2}))
	if err != nil {
		t.Fatalf("module broken after errors: %v", err)
	}
	torch.CloseValue(out)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func TestClosed(t *testing.T) {
	m, err := torch.Load(zoo(t, "multiio", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	x := mustTensor(t, []float32{1})
	out, err := m.Run("double_it", x)
	if err != nil {
		t.Fatal(err)
	}
	o := out.(*torch.Tensor)
	o.Close()
	o.Close()
	if _, err := torch.Data[float32](o); !errors.Is(err, torch.ErrClosed) {
		t.Errorf("Data after Close: %v", err)
	}
	if _, err := m.Run("double_it", o); !errors.Is(err, torch.ErrClosed) {
		t.Errorf("closed tensor input: %v", err)
	}
	m.Close()
	m.Close()
	if _, err := m.Run("double_it", x); !errors.Is(err, torch.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
}

// Native outputs can be fed back as inputs without copying through Go.
func TestNativeTensorAsInput(t *testing.T) {
	m := loadMultiIO(t)
	a, err := m.Run("double_it", mustTensor(t, []float32{1, 2}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Run("double_it", a)
	if err != nil {
		t.Fatal(err)
	}
	if got := float32s(t, b); maxAbsDiff(got, []float32{4, 8}) != 0 {
		t.Fatalf("got %v", got)
	}
	torch.CloseValue(a)
	torch.CloseValue(b)
}

// Forward on one module is safe from several goroutines at once, each on its own locked
// OS thread as the daemon's workers run it.
func TestConcurrentForward(t *testing.T) {
	m := loadMultiIO(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for i := range 200 {
				v := float32(g*1000 + i)
				out, err := m.Run("double_it", mustTensor(t, []float32{v, -v}))
				if err != nil {
					errs <- err
					return
				}
				d, _ := torch.Data[float32](out.(*torch.Tensor))
				if d[0] != 2*v || d[1] != -2*v {
					errs <- errors.New("response does not match its own input")
				}
				torch.CloseValue(out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestThreadsAndDevices(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.SetNumThreads(2)
	if n := torch.NumThreads(); n != 2 {
		t.Errorf("NumThreads = %d after SetNumThreads(2)", n)
	}
	torch.SetNumThreads(1)
	if n := torch.NumThreads(); n != 1 {
		t.Errorf("NumThreads = %d after SetNumThreads(1)", n)
	}
	if torch.CUDAAvailable() != (torch.CUDADeviceCount() > 0) {
		t.Errorf("CUDAAvailable %v but %d devices", torch.CUDAAvailable(), torch.CUDADeviceCount())
	}
	if v := torch.Version(); !strings.HasPrefix(v, "1.") && !strings.HasPrefix(v, "2.") {
		t.Errorf("Version = %q", v)
	}
	m := loadMultiIO(t)
	if m.Device() != "cpu" {
		t.Errorf("Device = %q", m.Device())
	}
	s, err := m.Schema("forward")
	if err != nil || !strings.Contains(s, "forward(") {
		t.Errorf("Schema = %q, %v", s, err)
	}
}

// A file torch.save wrote (a pickled nn.Module, a state dict, or the legacy format) is refused
// with what it is and what to do, without LibTorch's "checkpoint file is corrupted" or its
// directory (an archive's temporary extraction).
func TestLoadPickleIsNotTorchScript(t *testing.T) {
	py, err := filepath.Abs(filepath.Join("..", ".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Skip("torch.save's files are made by the project venv's Python (make venv)")
	}
	dir := t.TempDir()
	script := `import sys, torch
m = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
torch.save(m, sys.argv[1] + "/module.pt")
torch.save(m.state_dict(), sys.argv[1] + "/weights.pt")
torch.save(m.state_dict(), sys.argv[1] + "/legacy.pth", _use_new_zipfile_serialization=False)
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	for _, f := range []string{"module.pt", "weights.pt", "legacy.pth"} {
		_, err := torch.Load(filepath.Join(dir, f))
		if !errors.Is(err, torch.ErrNotTorchScript) {
			t.Errorf("%s: %v, want ErrNotTorchScript", f, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{f + " is a pickled Python object", "torch.jit.script", "--model-file"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", f, msg, want)
			}
		}
		if strings.Contains(msg, dir) || strings.Contains(msg, "corrupted") {
			t.Errorf("%s: %q shows the directory or LibTorch's message", f, msg)
		}
	}
}
