package core

import (
	"cmp"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
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

// Runtime loads the files of a model version into a Model. The daemon hands the registry its
// runtimes (Options.Runtimes): LibTorch (TorchScript and .pt2), ONNX Runtime, handler
// processes; core imports none of them.
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
	// ShapePlanned models compile for fixed batch sizes beside a dynamic one (OpenVINO): core
	// tells them, once before the workers start, the row counts the version's forwards run
	// most often (ForwardRows); they keep a model for each of those they compile and no
	// other, and return the counts kept.
	ShapePlanned interface {
		PlanRows(rows []int) (kept []int, err error)
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
	// Explainer models explain one request on the worker's thread (integrated gradients);
	// CanExplain says why one cannot, before the request is queued.
	Explainer interface {
		CanExplain() error
		Explain(s *handlers.Sample, target int) (*handlers.Response, error)
	}
	// HandlerExplainer models are Explainers whose own handler explains (a Python handler's
	// explain_handle, in its process), whatever torchd's handler for them offers.
	HandlerExplainer interface {
		Explainer
		ExplainsInHandler()
	}
	// ThreadSetter models take the intra-op threads each forward runs with, set on the
	// worker's OS thread before the forward (LibTorch's). Their workers are locked to their
	// OS threads; other models' workers are plain goroutines.
	ThreadSetter interface {
		SetThreadsHere(n int)
	}
	// ThreadCarrier models run each forward in another process (a handler process), so
	// its share of the cores cannot be set on the calling thread: it goes with the batch.
	// threads is the forward's share (coreShare), 0 where the model takes none (a GPU).
	// Their workers are plain goroutines.
	ThreadCarrier interface {
		RunThreads(batch []*handlers.Sample, stage *handlers.Stage, threads int) ([][]handlers.Tensor, error)
	}
	// ThreadBound models keep per-thread state across forwards on the calling OS thread
	// when BoundToThread says so (ONNX Runtime's intra-op pool, which the caller joins as
	// its first thread): their workers are locked to their OS threads too.
	ThreadBound interface {
		BoundToThread() bool
	}
	// MemoryTrimmer models give their allocator's free memory back when the workers idle.
	MemoryTrimmer interface {
		TrimMemory()
	}
	// SchemaSigned models guess their inputs when nothing declares them (a TorchScript
	// module's forward schema).
	SchemaSigned interface {
		SchemaInputs() []archive.TensorSpec
	}
)

// ProcessInfo is one process a model runs in.
type ProcessInfo struct {
	PID      int
	RSSBytes int64
}

// runtimeFor picks the runtime of a model: the one its config names, else the first that
// accepts it. Ensembles are core's own (nil).
func (r *Registry) runtimeFor(am *archive.Model) (Runtime, error) {
	if am.Config.Runtime == RuntimeEnsemble {
		return nil, nil // core's own (loadEnsemble)
	}
	if name := am.Config.Runtime; name != "" {
		for _, rt := range r.opts.Runtimes {
			if rt.Name() == name {
				return rt, nil
			}
		}
		return nil, errorf(ErrBadModel, "model %s: runtime %q is not available in this torchd (it has %s)", am.Name, name, cmp.Or(strings.Join(r.runtimeNames(), ", "), "none"))
	}
	for _, rt := range r.opts.Runtimes {
		if rt.Accepts(am) {
			return rt, nil
		}
	}
	return nil, errorf(ErrBadModel, "model %s: no runtime of this torchd runs %s (it has %s)", am.Name, filepath.Base(am.SerializedFile), cmp.Or(strings.Join(r.runtimeNames(), ", "), "none"))
}

func (r *Registry) runtimeNames() []string {
	names := []string{}
	for _, rt := range r.opts.Runtimes {
		names = append(names, rt.Name())
	}
	return names
}
