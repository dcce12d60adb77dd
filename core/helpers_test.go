package core

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/handlers/handlertest"
	"github.com/torchd/torchd/torch"
)

// The core's tests serve real models of the zoo (models/out, made by `make models`): the
// digits CNN behind the tensor handler, and the slow model, whose run time and failures the
// request controls (models/slow.py).

var zooDir = filepath.Join("..", "models", "out")

// probe serves models whose archive names handler "core_probe" as the tensor handler does, and
// lets a test run code on the worker's thread before each forward.
var probe = handlertest.Register("core_probe", "tensor")

// testRegistry returns a registry whose forwards share cores cores (0: GOMAXPROCS), closed
// when the test ends.
func testRegistry(t *testing.T, cores int) *Registry {
	t.Helper()
	r := NewRegistry(Options{Defaults: testDefaults, Cores: cores, Runtimes: []Runtime{torchRuntime{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	return r
}

// testDefaults are the daemon's defaults that the tests rely on (package daemon's
// ModelDefaults): batches of one, no delay, one worker.
var testDefaults = archive.Settings{
	BatchSize: archive.Fixed(1), MaxBatchDelay: archive.Fixed(time.Duration(0)), MinWorkers: archive.Fixed(1),
	JobQueueSize: archive.Of(100), ResponseTimeout: archive.Of(120 * time.Second), StartupTimeout: archive.Of(120 * time.Second),
	Device: archive.Of("cpu"), Precision: archive.Of("fp32"),
}

// zooArchive opens a directory archive of the zoo model zoo, served by handler with config
// (model-config.toml's lines after the handler's).
func zooArchive(t *testing.T, zoo, handler, config string) *archive.Model {
	t.Helper()
	model, err := filepath.Abs(filepath.Join(zooDir, zoo, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(model, filepath.Join(dir, "model.pt")); err != nil {
		t.Fatal(err)
	}
	toml := "handler = \"" + handler + "\"\n" + config
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return am
}

// digitsConfig declares the digits CNN's input, for the tensor handler and its warm-up.
const digitsConfig = `
[[inputs]]
name = "input__0"
dtype = "float32"
shape = [-1, 1, 28, 28]
`

// slowConfig declares the slow model's input: [N, 2], milliseconds of work and a sign.
const slowConfig = `
[[inputs]]
name = "input__0"
dtype = "float32"
shape = [-1, 2]
`

// addDigits registers the digits CNN as name (version "1") behind handler with settings.
func addDigits(t *testing.T, r *Registry, name, handler string, s archive.Settings) *ModelVersion {
	t.Helper()
	v, err := r.Add(name, "1", RegisterRequest{Name: name, Synchronous: true, Settings: s}, zooArchive(t, "digits", handler, digitsConfig))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// addSlow registers the slow model as name (version "1") with settings.
func addSlow(t *testing.T, r *Registry, name string, s archive.Settings) *ModelVersion {
	t.Helper()
	v, err := r.Add(name, "1", RegisterRequest{Name: name, Synchronous: true, Settings: s}, zooArchive(t, "slow", "tensor", slowConfig))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// float32Sample is one request's tensor of the given shape and values.
func float32Sample(shape []int64, vals ...float32) *handlers.Sample {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return &handlers.Sample{Items: int(shape[0]), Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: shape, Data: data}}}
}

// digit is a request for the digits CNN: one 28×28 image of value x everywhere.
func digit(x float32) *handlers.Sample {
	vals := make([]float32, 28*28)
	for i := range vals {
		vals[i] = x
	}
	return float32Sample([]int64{1, 1, 28, 28}, vals...)
}

// slowRow is a request for the slow model: ms of work, and a negative sign to make it fail.
func slowRow(ms, sign float32) *handlers.Sample { return float32Sample([]int64{1, 2}, ms, sign) }

// infer runs one request through v's path, as a front-end does.
func infer(v *ModelVersion, c Call, s *handlers.Sample) (Result, error) {
	a, err := v.admit(c)
	if err != nil {
		return Result{}, err
	}
	defer a.release()
	return a.run(s, time.Now(), 0, nil)
}

// float32s reads a float32 output tensor.
func float32s(t handlers.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

func errorIs(err, kind error) bool { return errors.Is(err, kind) }

// errorContains fails t unless err is of kind and its message contains part.
func errorContains(t *testing.T, what string, err, kind error, part string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), part) {
		t.Errorf("%s: error %v, want %q containing %q", what, err, kind, part)
	}
}

// torchRuntime is LibTorch as a runtime for core's own tests: backends/libtorch imports core,
// so core's tests cannot import it. It is that runtime's load and batch step, without the
// load options (freeze, bf16) the tests here do not use.
type torchRuntime struct{}

func (torchRuntime) Name() string { return "libtorch" }
func (torchRuntime) Accepts(am *archive.Model) bool {
	return am.Config.Handler != archive.HandlerPython && archive.IsTorchName(filepath.Base(am.SerializedFile))
}

func (torchRuntime) Load(req LoadRequest) (Model, error) {
	am, s := req.Archive, req.Settings
	var m torch.Model
	var err error
	if am.IsPackage() {
		file := am.SerializedPath()
		if f, _, ok := am.PackageFor(s.Precision); ok {
			file = f
		}
		m, err = torch.LoadPackage(file, torch.WithRunners(max(1, s.MaxWorkers)))
	} else {
		m, err = torch.Load(am.SerializedPath(), torch.WithDevice(s.Device))
	}
	if err != nil {
		return nil, err
	}
	return &torchModel{m: m}, nil
}

type torchModel struct {
	h handlers.Handler
	m torch.Model
}

func (t *torchModel) Run(batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
	return handlers.InferStaged(t.h, t.m, batch, st)
}
func (*torchModel) Kind() string         { return "libtorch" }
func (t *torchModel) Device() string     { return t.m.Device() }
func (t *torchModel) Close() error       { return t.m.Close() }
func (*torchModel) SetThreadsHere(n int) { torch.SetNumThreadsHere(n) }
func (t *torchModel) Torch() torch.Model { return t.m }
func (t *torchModel) BindHandler(h handlers.Handler) (err error) {
	t.h = h
	t.m, err = handlers.Bind(h, t.m, 4)
	return err
}
func (t *torchModel) MaxRows() int64 {
	if p, ok := t.m.(*torch.Package); ok {
		_, hi := p.BatchRange()
		return hi
	}
	return 0
}
func (t *torchModel) SchemaInputs() []archive.TensorSpec { return nil }
func (t *torchModel) CanExplain() error {
	if _, ok := t.m.(*torch.Module); !ok {
		return errors.New("an AOTInductor package has no backward")
	}
	if _, ok := t.h.(handlers.Explainer); !ok {
		return errors.New("its handler does not explain")
	}
	return nil
}
func (t *torchModel) Explain(s *handlers.Sample, target int) (*handlers.Response, error) {
	return t.h.(handlers.Explainer).Explain(t.m.(*torch.Module), s, target)
}
