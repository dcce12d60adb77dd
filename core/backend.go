package core

import (
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Backend runs a model version's batches: a worker hands it the preprocessed samples of one
// batch, and it answers each sample's outputs in their order. The in-process LibTorch runner
// (the handler's batch step over a torch.Model, on the worker's thread) is the first; a model
// that runs whole batches itself, as a handler process does (package handlerproc), is its
// own Backend. The front-ends never learn which one serves them.
type Backend interface {
	// Run runs one batch; stage is the worker's reusable staging buffer (nil: none).
	Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error)
	// Kind names the backend in the batch spans: "libtorch", or "handler_process".
	Kind() string
}

// backendFor is the backend that runs m's batches with h: m itself when it runs whole
// batches, else the LibTorch runner.
func backendFor(h handlers.Handler, m torch.Model) Backend {
	if b, ok := m.(Backend); ok {
		return b
	}
	return libtorchRunner{h: h, m: m}
}

// libtorchRunner is the in-process backend: concatenate → forward → split, or the
// handler's own Infer, over a LibTorch model.
type libtorchRunner struct {
	h handlers.Handler
	m torch.Model
}

func (b libtorchRunner) Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error) {
	return handlers.InferStaged(b.h, b.m, batch, stage)
}

func (libtorchRunner) Kind() string { return "libtorch" }

// explainer is a backend that explains a request on the worker's thread.
type explainer interface {
	explain(s *handlers.Sample, target int) (*handlers.Response, error)
}

// explain is the handler's Integrated Gradients over the TorchScript module (which
// ModelVersion.explainable checked before the request was admitted).
func (b libtorchRunner) explain(s *handlers.Sample, target int) (*handlers.Response, error) {
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
