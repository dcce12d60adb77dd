package core

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// fakeRuntime stands for a runtime other than LibTorch (as ONNX Runtime is): it doubles each
// float32 input element. It tests the seam itself: which runtime loads a model, what core
// asks of it, and how its failures reach a request. The real runtimes have their own tests.
type fakeRuntime struct {
	loadErr error
	loaded  atomic.Int32
	model   *fakeModel
}

func (f *fakeRuntime) Name() string                   { return "fake" }
func (f *fakeRuntime) Accepts(am *archive.Model) bool { return archive.IsONNXName(am.SerializedFile) }
func (f *fakeRuntime) Load(req LoadRequest) (Model, error) {
	f.loaded.Add(1)
	if f.loadErr != nil {
		return nil, f.loadErr
	}
	f.model = &fakeModel{threads: req.Threads}
	return f.model, nil
}

type fakeModel struct {
	threads int
	mu      sync.Mutex
	batches []int // the samples of each batch run
	failOn  float32
	closed  atomic.Bool
	handler handlers.Handler
}

func (m *fakeModel) Kind() string   { return "fake" }
func (m *fakeModel) Device() string { return "cpu" }
func (m *fakeModel) Close() error   { m.closed.Store(true); return nil }
func (m *fakeModel) BindHandler(h handlers.Handler) error {
	m.handler = h
	return nil
}

func (m *fakeModel) Signature() (ins, outs []archive.TensorSpec) {
	return []archive.TensorSpec{{Name: "x", DType: "float32", Shape: []int64{-1, 2}}},
		[]archive.TensorSpec{{Name: "y", DType: "float32", Shape: []int64{-1, 2}}}
}

func (m *fakeModel) Run(batch []*handlers.Sample, _ *handlers.Stage) ([][]handlers.Tensor, error) {
	m.mu.Lock()
	m.batches = append(m.batches, len(batch))
	m.mu.Unlock()
	outs := make([][]handlers.Tensor, len(batch))
	for i, s := range batch {
		in := s.Tensors[0]
		out := make([]byte, len(in.Data))
		for j := 0; j+4 <= len(in.Data); j += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[j:]))
			if m.failOn != 0 && x == m.failOn {
				return nil, errors.New("the fake model fails on its failing value")
			}
			binary.LittleEndian.PutUint32(out[j:], math.Float32bits(2*x))
		}
		outs[i] = []handlers.Tensor{{DType: torch.Float32, Shape: in.Shape, Data: out, Name: "y"}}
	}
	return outs, nil
}

// fakeArchive is a directory archive whose serialized file is model.onnx (bytes no runtime
// but the fake reads), served by the tensor handler with config's lines.
func fakeArchive(t *testing.T, config string) *archive.Model {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), []byte("fake"), 0o644); err != nil {
		t.Fatal(err)
	}
	toml := "handler = \"tensor\"\nserialized_file = \"model.onnx\"\n" + config + `
[[inputs]]
name = "x"
dtype = "float32"
shape = [-1, 2]
`
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return am
}

func fakeRegistry(t *testing.T, rt Runtime) *Registry {
	t.Helper()
	r := NewRegistry(Options{Defaults: testDefaults, Runtimes: []Runtime{rt}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	return r
}

func floats(xs ...float32) handlers.Tensor {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return handlers.Tensor{DType: torch.Float32, Shape: []int64{int64(len(xs) / 2), 2}, Data: b}
}

func sampleInput(xs ...float32) func(*ModelVersion) (Input, error) {
	return func(*ModelVersion) (Input, error) {
		t := floats(xs...)
		return Input{Sample: &handlers.Sample{Items: int(t.Shape[0]), Tensors: []handlers.Tensor{t}}}, nil
	}
}

func TestServeThroughAnotherRuntime(t *testing.T) {
	rt := &fakeRuntime{}
	r := fakeRegistry(t, rt)
	v, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Model().Kind(); got != "fake" {
		t.Errorf("the version runs on %q, want the runtime that accepted its file", got)
	}
	if rt.model.handler == nil {
		t.Error("the runtime's model was not given its handler")
	}
	if rt.model.threads < 1 {
		t.Errorf("the runtime was asked to load with %d threads a worker", rt.model.threads)
	}
	res, err := r.Serve(&Request{Model: "fake", Raw: true, Decode: sampleInput(1, 2, 3, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Out) != 1 {
		t.Fatalf("%d outputs, want 1", len(res.Out))
	}
	want := []float32{2, 4, 6, 8}
	for i, w := range want {
		got := math.Float32frombits(binary.LittleEndian.Uint32(res.Out[0].Data[4*i:]))
		if math.Abs(float64(got-w)) > 1e-6 {
			t.Errorf("element %d = %v, want %v", i, got, w)
		}
	}
	if err := r.Unregister("fake", "1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the model closed after unregister", rt.model.closed.Load)
}

func TestServeBatchesForAnotherRuntime(t *testing.T) {
	rt := &fakeRuntime{}
	r := fakeRegistry(t, rt)
	// Four requests within a second's delay make one batch of four.
	if _, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "batch_size = 4\nmax_batch_delay = 5000\n")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Serve(&Request{Model: "fake", Raw: true, Decode: sampleInput(float32(i), 1)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rt.model.mu.Lock()
	defer rt.model.mu.Unlock()
	last := rt.model.batches[len(rt.model.batches)-1]
	if last != 4 {
		t.Errorf("batches %v: want the four requests in one batch", rt.model.batches)
	}
}

func TestAnotherRuntimesFailures(t *testing.T) {
	t.Run("load", func(t *testing.T) {
		r := fakeRegistry(t, &fakeRuntime{loadErr: errors.New("the graph is truncated")})
		_, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, ""))
		if !errors.Is(err, ErrLoadFailed) {
			t.Fatalf("err %v, want ErrLoadFailed", err)
		}
		if _, err := r.Get("fake", ""); !errors.Is(err, ErrModelNotFound) {
			t.Errorf("a failed load left the model registered: %v", err)
		}
	})
	t.Run("batch", func(t *testing.T) {
		rt := &fakeRuntime{}
		r := fakeRegistry(t, rt)
		if _, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "")); err != nil {
			t.Fatal(err)
		}
		rt.model.failOn = 7
		_, err := r.Serve(&Request{Model: "fake", Raw: true, Decode: sampleInput(7, 7)})
		if !errors.Is(err, ErrInference) {
			t.Fatalf("err %v, want ErrInference", err)
		}
		// The model goes on serving.
		if _, err := r.Serve(&Request{Model: "fake", Raw: true, Decode: sampleInput(1, 1)}); err != nil {
			t.Fatalf("after a failed batch: %v", err)
		}
	})
	t.Run("named runtime missing", func(t *testing.T) {
		r := NewRegistry(Options{Defaults: testDefaults, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		t.Cleanup(r.Close)
		_, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, ""))
		if !errors.Is(err, ErrBadModel) {
			t.Fatalf("err %v, want ErrBadModel: no runtime runs model.onnx", err)
		}
	})
	t.Run("explain", func(t *testing.T) {
		r := fakeRegistry(t, &fakeRuntime{})
		if _, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "")); err != nil {
			t.Fatal(err)
		}
		_, err := r.Serve(&Request{Model: "fake", Explain: true, Decode: sampleInput(1, 1)})
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err %v, want ErrUnsupported", err)
		}
	})
}

// The self-tuner measures another runtime's batches as it measures LibTorch's: a model of
// that runtime registered with batch_size "auto" gets its curve and a tuner.
func TestAutoBatchingAnotherRuntime(t *testing.T) {
	rt := &fakeRuntime{}
	r := NewRegistry(Options{Defaults: testDefaults, Runtimes: []Runtime{rt}, CacheDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	v, err := r.Add("fake", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "batch_size = \"auto\"\nmax_batch_delay = \"auto\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.AutoBatching() == nil {
		t.Fatal("no self-tuning for the runtime's model")
	}

	rt.model.mu.Lock()
	largest := slices.Max(rt.model.batches)
	rt.model.mu.Unlock()
	if largest < 2 {
		t.Errorf("the curve measured batches of at most %d", largest)
	}
	if _, err := r.Serve(&Request{Model: "fake", Raw: true, Decode: sampleInput(1, 2)}); err != nil {
		t.Fatal(err)
	}
}
