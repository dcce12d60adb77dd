// Package coretest has a runtime double for tests of the serving path above the runtimes
// (core.Registry.Serve and the protocol front-ends): its models run in Go, doubling each
// float32 of their input, and a test can hold their worker, fail a batch or count the batches.
// It goes through core's own seam (core.Runtime), so the serving code has no hooks for tests;
// the real runtimes have their own tests with real models. Production code must not import it.
package coretest

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Runtime loads every archive whose serialized file is model.onnx (bytes only it reads) as a
// Model. Its zero value is ready.
type Runtime struct {
	// LoadErr, when set, is every load's error (a runtime's refusal of the file).
	LoadErr error
	// Compute, when set, is what the models compute for each sample in place of doubling
	// (for a handler whose model answers other shapes: an embedding model's).
	Compute func(s *handlers.Sample) ([]handlers.Tensor, error)

	mu      sync.Mutex
	models  map[string]*Model // by "name/version", the latest load's
	loading chan struct{}     // each load under HoldLoads sends here, then waits for loadGate
	gate    chan struct{}
}

// HoldLoads makes each following load signal loading when it starts and wait until release
// is called: the model is then registered and still loading (core.ErrLoading).
func (rt *Runtime) HoldLoads() (loading <-chan struct{}, release func()) {
	l, g := make(chan struct{}, 16), make(chan struct{})
	rt.mu.Lock()
	rt.loading, rt.gate = l, g
	rt.mu.Unlock()
	var once sync.Once
	return l, func() {
		once.Do(func() {
			rt.mu.Lock()
			rt.loading, rt.gate = nil, nil
			rt.mu.Unlock()
			close(g)
		})
	}
}

func (*Runtime) Name() string { return "fake" }
func (*Runtime) Accepts(am *archive.Model) bool {
	return filepath.Base(am.SerializedFile) == "model.onnx"
}

func (rt *Runtime) Load(req core.LoadRequest) (core.Model, error) {
	rt.mu.Lock()
	loading, gate := rt.loading, rt.gate
	rt.mu.Unlock()
	if gate != nil {
		loading <- struct{}{}
		<-gate
	}
	if rt.LoadErr != nil {
		return nil, rt.LoadErr
	}
	m := &Model{threads: req.Threads, ins: req.Archive.Config.Inputs, compute: rt.Compute}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.models == nil {
		rt.models = map[string]*Model{}
	}
	rt.models[req.Name+"/"+req.Version] = m
	return m, nil
}

// Model is the model the runtime loaded for name's version, nil if none was.
func (rt *Runtime) Model(name, version string) *Model {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.models[name+"/"+version]
}

// Model is a loaded model: each output tensor is its input's, float32 elements doubled
// (other types copied), named "y" after the first input and "y<i>" after the others.
type Model struct {
	threads int
	ins     []archive.TensorSpec
	compute func(s *handlers.Sample) ([]handlers.Tensor, error)

	mu      sync.Mutex
	batches []int               // the samples of each batch run
	inputs  [][]handlers.Tensor // each sample's tensors, copied, in the order run
	failOn  float32
	inPlace int           // batches whose inputs lay where they ran (handlers.Stage.InPlace)
	held    chan struct{} // each Run under hold sends here, then waits for gate
	gate    chan struct{}
	closed  bool
}

// Kind, Device and Close are core.Model's.
func (*Model) Kind() string   { return "fake" }
func (*Model) Device() string { return "cpu" }
func (m *Model) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// BindHandler takes the handler the archive names (core.HandlerBinder): the fake runs
// tensors whatever the handler.
func (*Model) BindHandler(handlers.Handler) error { return nil }

// Threads is the intra-op threads the model was loaded with.
func (m *Model) Threads() int { return m.threads }

// Closed reports whether the model was closed (unregistered or replaced).
func (m *Model) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Batches returns the number of samples in each batch run so far, warm-up included.
func (m *Model) Batches() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.batches...)
}

// LastInput returns the tensors of the latest sample run: what a request's decoding handed
// the model. The data are copies: a request's body is reused once it is answered.
func (m *Model) LastInput() []handlers.Tensor {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.inputs) == 0 {
		return nil
	}
	return m.inputs[len(m.inputs)-1]
}

// FailOn makes every batch holding an element equal to x fail as a whole (0: none does).
func (m *Model) FailOn(x float32) {
	m.mu.Lock()
	m.failOn = x
	m.mu.Unlock()
}

// Hold makes each following Run signal held when it starts and wait until release is
// called, so that a test reaches a state (a busy worker, a full queue) whatever the machine's
// speed. release ends the hold for the runs waiting and those after.
func (m *Model) Hold() (held <-chan struct{}, release func()) {
	h, g := make(chan struct{}, 64), make(chan struct{})
	m.mu.Lock()
	m.held, m.gate = h, g
	m.mu.Unlock()
	var once sync.Once
	return h, func() {
		once.Do(func() {
			m.mu.Lock()
			m.held, m.gate = nil, nil
			m.mu.Unlock()
			close(g)
		})
	}
}

// InPlace returns how many batches ran where their inputs lay, without being stacked by a
// copy (core's rows, handlers.Request.Row).
func (m *Model) InPlace() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inPlace
}

// Run doubles the float32s of each sample's tensors. It stacks a batch into its stage first,
// as the real runtimes do, to count the batches that lay in place.
func (m *Model) Run(batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
	inPlace := false
	if st != nil && len(batch) > 1 {
		before := st.InPlace()
		_, _, err := st.Stack(batch)
		inPlace = err == nil && st.InPlace() > before
	}
	m.mu.Lock()
	if inPlace {
		m.inPlace++
	}
	m.batches = append(m.batches, len(batch))
	for _, s := range batch {
		ts := make([]handlers.Tensor, len(s.Tensors))
		for i, t := range s.Tensors {
			ts[i] = t
			ts[i].Data = append([]byte(nil), t.Data...)
		}
		m.inputs = append(m.inputs, ts)
	}
	held, gate, failOn := m.held, m.gate, m.failOn
	m.mu.Unlock()
	if gate != nil {
		held <- struct{}{}
		<-gate
	}
	outs := make([][]handlers.Tensor, len(batch))
	for i, s := range batch {
		if m.compute != nil {
			out, err := m.compute(s)
			if err != nil {
				return nil, err
			}
			outs[i] = out
			continue
		}
		for j, in := range s.Tensors {
			out := handlers.Tensor{DType: in.DType, Shape: in.Shape, Data: append([]byte(nil), in.Data...), Name: "y"}
			if j > 0 {
				out.Name = "y" + string(rune('0'+j))
			}
			if in.DType == torch.Float32 {
				for k := 0; k+4 <= len(in.Data); k += 4 {
					x := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[k:]))
					if failOn != 0 && x == failOn {
						return nil, errors.New("the fake model fails on its failing value")
					}
					binary.LittleEndian.PutUint32(out.Data[k:], math.Float32bits(2*x))
				}
			}
			outs[i] = append(outs[i], out)
		}
	}
	return outs, nil
}

// Signature is the archive's declared inputs, and an output "y" like the first (core.Signed).
func (m *Model) Signature() (ins, outs []archive.TensorSpec) {
	if len(m.ins) == 0 {
		return nil, nil
	}
	y := m.ins[0]
	y.Name = "y"
	return m.ins, []archive.TensorSpec{y}
}

// Defaults are the settings the daemon's tests rely on (package daemon's ModelDefaults):
// batches of one, no delay, one worker.
var Defaults = archive.Settings{
	BatchSize: archive.Fixed(1), MaxBatchDelay: archive.Fixed(time.Duration(0)), MinWorkers: archive.Fixed(1),
	JobQueueSize: archive.Of(100), ResponseTimeout: archive.Of(120 * time.Second), StartupTimeout: archive.Of(120 * time.Second),
	Device: archive.Of("cpu"), Precision: archive.Of("fp32"),
}

// NewRegistry returns a registry whose only runtime is rt, with Defaults, closed when the test
// ends.
func NewRegistry(t testing.TB, rt *Runtime) *core.Registry {
	t.Helper()
	return NewRegistryOf(t, rt)
}

// NewRegistryOf returns a registry over the given runtimes (the fake one, or real backends:
// libtorch.Backend{}, &onnx.Backend{}, &handlerproc.Backend{...}), with Defaults, closed when
// the test ends. Package-level tests of front-ends use it to serve real models without a daemon.
func NewRegistryOf(t testing.TB, runtimes ...core.Runtime) *core.Registry {
	t.Helper()
	r := core.NewRegistry(core.Options{Defaults: Defaults, Runtimes: runtimes, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	return r
}

// XConfig declares the input most tests use: "x", float32 rows of two.
const XConfig = `
[[inputs]]
name = "x"
dtype = "float32"
shape = [-1, 2]
`

// Archive is a directory archive of the fake model served by handler, with config's lines of
// model-config.toml (settings, [[inputs]]) and files (path in the archive → content) beside.
func Archive(t testing.TB, handler, config string, files map[string]string) *archive.Model {
	t.Helper()
	dir := t.TempDir()
	files = maps.Clone(files)
	if files == nil {
		files = map[string]string{}
	}
	files["model.onnx"] = "fake"
	files["model-config.toml"] = "handler = \"" + handler + "\"\nserialized_file = \"model.onnx\"\n" + config
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return am
}

// Add registers am as name's version "1" and waits until it is ready.
func Add(t testing.TB, r *core.Registry, name string, am *archive.Model) *core.ModelVersion {
	t.Helper()
	v, err := r.Add(name, "1", core.RegisterRequest{Name: name, Synchronous: true}, am)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Floats is a float32 tensor of shape holding xs.
func Floats(shape []int64, xs ...float32) handlers.Tensor {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return handlers.Tensor{DType: torch.Float32, Shape: shape, Data: b}
}

// Float32s reads a float32 tensor's elements.
func Float32s(t handlers.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// WaitFor polls cond until it holds, failing t after a minute: what a test waits on is an
// event of the code under test, never a fixed time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
