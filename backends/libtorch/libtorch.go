// Package libtorch is the LibTorch runtime (core.Runtime): TorchScript files and AOTInductor
// packages run in torchd's process through the torch binding, a batch on the worker's own OS
// thread with the worker's share of the cores. It knows LibTorch's models and the handlers'
// batch step over them; core knows neither.
package libtorch

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Name is the runtime's name in configs and describe.
const Name = "libtorch"

// Backend loads TorchScript files and AOTInductor packages. Its zero value is ready.
type Backend struct{}

var (
	_ core.Runtime       = Backend{}
	_ core.Model         = (*Model)(nil)
	_ core.Signed        = (*Model)(nil)
	_ core.RowLimited    = (*Model)(nil)
	_ core.HandlerBinder = (*Model)(nil)
	_ core.Explainer     = (*Model)(nil)
	_ core.ThreadSetter  = (*Model)(nil)
	_ core.MemoryTrimmer = (*Model)(nil)
)

// Name is "libtorch".
func (Backend) Name() string { return Name }

// Accepts a TorchScript file or an AOTInductor package, unless the config names another
// runtime or a Python handler runs the archive.
func (Backend) Accepts(am *archive.Model) bool {
	return (am.Config.Runtime == "" || am.Config.Runtime == Name) && am.Config.Handler != archive.HandlerPython &&
		archive.IsTorchName(filepath.Base(am.SerializedFile))
}

// Load loads the file in the precision core chose (req.Settings.Precision), and checks a
// package's batch range against batch_size.
func (Backend) Load(req core.LoadRequest) (core.Model, error) {
	s := req.Settings
	m, err := LoadModel(req.Archive, s)
	if errors.Is(err, torch.ErrFP32Modules) {
		return nil, core.Errorf(core.ErrBadModel, "model %s: fp32_modules: %v", req.Name, err)
	}
	if err != nil {
		return nil, err
	}
	// The package's own specs decide, should the archive's record disagree with them.
	if p, ok := m.(*torch.Package); ok {
		if lo, hi := p.BatchRange(); int64(s.BatchSize) < lo || int64(s.BatchSize) > hi {
			m.Close()
			file := req.Archive.SerializedPath()
			if f, _, ok := req.Archive.PackageFor(s.Precision); ok {
				file = f
			}
			return nil, core.Errorf(core.ErrBadModel, "model %s: batch_size %d is outside the batch range [%d, %d] that %s was exported with", req.Name, s.BatchSize, lo, hi, filepath.Base(file))
		}
	}
	return &Model{m: m, runners: max(1, s.MaxWorkers)}, nil
}

// LoadModel loads the archive's serialized file with the settings' device, precision and
// freeze: an AOTInductor package (the serialized one, or its variant in the precision, "auto"
// chosen for this host) with one runner per worker the pool may grow to (a worker beyond
// them waits for one), else TorchScript.
func LoadModel(am *archive.Model, s core.ModelSettings) (torch.Model, error) {
	precision, _, err := core.ServedPrecision(am, s.Precision, s.Device)
	if err != nil {
		return nil, err
	}
	if am.IsPackage() {
		file, p, ok := am.PackageFor(precision)
		if !ok {
			file, p = am.SerializedPath(), am.Package
		}
		opts := []torch.PackageOption{torch.WithPackageDevice(s.Device), torch.WithRunners(max(1, s.MaxWorkers))}
		if p != nil && p.Plain {
			var specs []torch.Spec
			for _, in := range p.Inputs {
				specs = append(specs, torch.Spec{Name: in.Name, DType: in.DType, Shape: in.Shape, Min: in.Min, Max: in.Max})
			}
			opts = append(opts, torch.WithInputSpecs(specs))
		}
		return torch.LoadPackage(file, opts...)
	}
	lopts := []torch.LoadOption{torch.WithDevice(s.Device)}
	if precision == "bf16" {
		lopts = append(lopts, torch.WithBF16(am.Config.FP32Modules...))
	}
	if s.Freeze {
		lopts = append(lopts, torch.WithFreeze())
	}
	if s.Optimize {
		lopts = append(lopts, torch.WithOptimize())
	}
	return torch.Load(am.SerializedPath(), lopts...)
}

// Model is a loaded LibTorch model with its handler's batch step: concatenate → forward →
// split, or the handler's own Infer.
type Model struct {
	h       handlers.Handler
	m       torch.Model
	runners int
}

// New wraps a loaded LibTorch model bound to its handler, for tests and tools that load one
// themselves.
func New(h handlers.Handler, m torch.Model) *Model { return &Model{h: h, m: m, runners: 1} }

func (b *Model) Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error) {
	if b.h == nil {
		return nil, errors.New("the model has no handler yet")
	}
	return handlers.InferStaged(b.h, b.m, batch, stage)
}

func (*Model) Kind() string     { return Name }
func (b *Model) Device() string { return b.m.Device() }
func (b *Model) Close() error   { return b.m.Close() }

// Torch is the LibTorch model, for the Triton adapter's checks of forward's arguments.
func (b *Model) Torch() torch.Model { return b.m }

// BindHandler binds the handler: a handler may run more than the serialized file (the
// captioner's encoder package); the model it returns owns both, one runner per worker.
func (b *Model) BindHandler(h handlers.Handler) error {
	bound, err := handlers.Bind(h, b.m, b.runners)
	if err != nil {
		return err
	}
	b.h, b.m = h, bound
	return nil
}

// MaxRows is a package's largest exported batch; a TorchScript module has no limit (0).
func (b *Model) MaxRows() int64 {
	if p, ok := b.m.(*torch.Package); ok {
		_, hi := p.BatchRange()
		return hi
	}
	return 0
}

// Signature is an AOTInductor package's recorded specs. A TorchScript module records none:
// its inputs are guessed from forward's schema (SchemaInputs) where nothing declares them.
func (b *Model) Signature() (ins, outs []archive.TensorSpec) {
	p, ok := b.m.(*torch.Package)
	if !ok {
		return nil, nil
	}
	for _, s := range p.Inputs() {
		ins = append(ins, archive.TensorSpec{Name: s.Name, DType: s.DType, Shape: s.Shape})
	}
	for _, s := range p.Outputs() {
		outs = append(outs, archive.TensorSpec{Name: s.Name, DType: s.DType, Shape: s.Shape})
	}
	return ins, outs
}

// SchemaInputs infers inputs from forward's TorchScript schema, e.g.
// "forward(__torch__.Net self, Tensor x) -> Tensor". The schema carries no dtype or shape:
// float32 and an unknown shape are assumed.
func (b *Model) SchemaInputs() []archive.TensorSpec {
	mod, ok := b.m.(*torch.Module)
	if !ok {
		return nil
	}
	args, err := mod.Args("forward")
	if err != nil {
		return nil
	}
	var out []archive.TensorSpec
	for _, a := range args {
		if a.Type == "Tensor" || a.Type == "Tensor?" {
			out = append(out, archive.TensorSpec{Name: a.Name, DType: "float32", Shape: []int64{-1}})
		}
	}
	return out
}

// CanExplain says why the model cannot explain, or nil: integrated gradients need
// TorchScript's autograd and a handler that explains.
func (b *Model) CanExplain() error {
	if _, ok := b.h.(handlers.Explainer); !ok {
		return fmt.Errorf("its handler does not explain")
	}
	if _, ok := b.m.(*torch.Module); !ok {
		return errors.New("it is an AOTInductor package, which cannot be explained (a compiled package has no backward)")
	}
	return nil
}

// Explain is the handler's Integrated Gradients over the TorchScript module, on the worker's
// thread.
func (b *Model) Explain(s *handlers.Sample, target int) (*handlers.Response, error) {
	ex, _ := b.h.(handlers.Explainer)
	m, _ := b.m.(*torch.Module)
	if ex == nil || m == nil {
		return nil, core.Errorf(core.ErrUnsupported, "the model cannot be explained")
	}
	resp, err := ex.Explain(m, s, target)
	if err != nil {
		return nil, core.WithKind(err, core.ErrInference) // a handler's own kind stays
	}
	return resp, nil
}

// SetThreadsHere sets LibTorch's intra-op threads for the calling OS thread's forwards.
func (*Model) SetThreadsHere(n int) { torch.SetNumThreadsHere(n) }

// TrimMemory gives LibTorch's allocator arenas back to the operating system.
func (*Model) TrimMemory() { torch.TrimArenas() }
