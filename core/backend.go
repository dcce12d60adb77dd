package core

import (
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Model is a loaded model version as a worker sees it: it runs the preprocessed samples of one
// batch and answers each sample's outputs in their order. A runtime makes it (Runtime); core
// asks what else it can do through the capability interfaces below, never through its type.
type Model interface {
	// Run runs one batch; stage is the worker's reusable staging buffer (nil: none).
	Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error)
	// Kind names the runtime in the batch spans and describe: "libtorch", "onnxruntime",
	// "handler_process".
	Kind() string
	// Device is where it runs: "cpu", "cuda:0".
	Device() string
	Close() error
}

// Runtime loads the files of a model version into a Model. LibTorch (TorchScript and .pt2) is
// built in; the daemon adds the others (ONNX Runtime, handler processes) in Options.Runtimes.
type Runtime interface {
	// Name is what a model's config names it by (archive.ModelConfig.Runtime) and what
	// describe shows: "onnxruntime", "python".
	Name() string
	// Accepts reports whether this runtime runs the model: by its files (model.onnx) or its
	// config (a Python handler, Triton's platform).
	Accepts(am *archive.Model) bool
	// Load loads the model with its resolved settings. An error is the model's alone: the
	// load fails, the server goes on.
	Load(req LoadRequest) (Model, error)
}

// LoadRequest is what a runtime gets to load one model version.
type LoadRequest struct {
	Name, Version string
	Archive       *archive.Model
	Settings      ModelSettings
	// Threads is the intra-op threads each worker's forward gets (the setting, else the
	// share of the cores among the workers the version starts with).
	Threads int
	Log     *slog.Logger
}

// Capabilities a Model may have. Core and the front-ends ask for them with a type assertion
// on the interface, so a runtime that lacks one is answered "unsupported", never guessed at.
type (
	// Signed models report their own inputs and outputs (an ONNX graph's, a package's specs),
	// which the version's signature and Triton's auto-complete use.
	Signed interface {
		Signature() (ins, outs []archive.TensorSpec)
	}
	// RowLimited models run at most a number of rows in one forward.
	RowLimited interface {
		MaxRows() int64
	}
	// ProcessScaler models run a process per worker (handler processes): scaling sets how
	// many, starting them before the workers that use them and stopping them after.
	ProcessScaler interface {
		SetProcesses(n int) error
	}
	// LogLimiter models rate-limit the output of their processes, and count what they drop.
	LogLimiter interface {
		DroppedLogLines() int64
	}
	// Interrupter models can cut their running batches short (handler processes, killed),
	// so that a stop keeps to shutdown_timeout.
	Interrupter interface {
		Interrupt()
	}
	// ProcessReporter models run in processes of their own, whose pids and memory describe
	// and the metrics report.
	ProcessReporter interface {
		Processes() []ProcessInfo
	}
	// HandlerBinder models take the handler made for them (its preprocessing decides what
	// their batches hold), before the first batch.
	HandlerBinder interface {
		BindHandler(h handlers.Handler) error
	}
	// explainer models explain one request on the worker's thread.
	explainer interface {
		explain(s *handlers.Sample, target int) (*handlers.Response, error)
	}
)

// ProcessInfo is one process a model runs in.
type ProcessInfo struct {
	PID      int
	RSSBytes int64
}

// runtimeFor picks the runtime of a model: the one its config names, else the first that
// accepts it, else the built-in LibTorch (nil).
func (r *Registry) runtimeFor(am *archive.Model) (Runtime, error) {
	if am.Config.Runtime == RuntimeEnsemble {
		return nil, nil // core's own (loadEnsemble)
	}
	if name := am.Config.Runtime; name != "" && name != RuntimeLibTorch {
		for _, rt := range r.opts.Runtimes {
			if rt.Name() == name {
				return rt, nil
			}
		}
		return nil, errorf(ErrBadModel, "model %s: runtime %q is not available in this torchd (it has %s)", am.Name, name, strings.Join(r.runtimeNames(), ", "))
	}
	for _, rt := range r.opts.Runtimes {
		if rt.Accepts(am) {
			return rt, nil
		}
	}
	if am.Config.Runtime == "" && !archive.IsTorchName(filepath.Base(am.SerializedFile)) && am.Config.Handler != archive.HandlerPython {
		return nil, errorf(ErrBadModel, "model %s: no runtime of this torchd runs %s (it has %s)", am.Name, filepath.Base(am.SerializedFile), strings.Join(r.runtimeNames(), ", "))
	}
	return nil, nil
}

// RuntimeLibTorch names the built-in runtime.
const RuntimeLibTorch = "libtorch"

func (r *Registry) runtimeNames() []string {
	names := []string{RuntimeLibTorch}
	for _, rt := range r.opts.Runtimes {
		names = append(names, rt.Name())
	}
	return names
}

// libtorchModel is the built-in runtime's model: concatenate → forward → split, or the
// handler's own Infer, over a LibTorch module or package, on the worker's thread.
type libtorchModel struct {
	h handlers.Handler
	m torch.Model
}

func (b libtorchModel) Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error) {
	return handlers.InferStaged(b.h, b.m, batch, stage)
}

func (libtorchModel) Kind() string     { return RuntimeLibTorch }
func (b libtorchModel) Device() string { return b.m.Device() }
func (b libtorchModel) Close() error   { return b.m.Close() }

// Torch is the LibTorch model under it, for the tuner's curves and the Triton adapter's
// checks of forward's arguments.
func (b libtorchModel) Torch() torch.Model { return b.m }

// MaxRows is a package's largest exported batch; a TorchScript module has no limit (0).
func (b libtorchModel) MaxRows() int64 {
	if p, ok := b.m.(*torch.Package); ok {
		_, hi := p.BatchRange()
		return hi
	}
	return 0
}

// Signature is an AOTInductor package's recorded specs; a TorchScript module records none.
func (b libtorchModel) Signature() (ins, outs []archive.TensorSpec) {
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

// explain is the handler's Integrated Gradients over the TorchScript module (which
// ModelVersion.explainable checked before the request was admitted).
func (b libtorchModel) explain(s *handlers.Sample, target int) (*handlers.Response, error) {
	ex, _ := b.h.(handlers.Explainer)
	m, _ := b.m.(*torch.Module)
	if ex == nil || m == nil {
		return nil, errorf(ErrUnsupported, "the model cannot be explained")
	}
	resp, err := ex.Explain(m, s, target)
	if err != nil {
		status, kind := handlers.StatusOf(err, 0), ErrInference
		if status >= 400 && status < 500 {
			kind = ErrBadInput
		}
		return nil, &Error{Kind: kind, Status: status, Msg: err.Error()}
	}
	return resp, nil
}

// torchOf is the LibTorch model under m, or nil for another runtime's.
func torchOf(m Model) torch.Model {
	if t, ok := m.(interface{ Torch() torch.Model }); ok {
		return t.Torch()
	}
	return nil
}
