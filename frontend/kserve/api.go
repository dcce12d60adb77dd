// Package kserve is the Open Inference Protocol (KServe v2, as Triton serves it) over REST
// and gRPC, with Triton's extensions (statistics, the model repository's index, load and
// unload, logging, classification, the model configuration), and KServe v1, each a codec over
// the one core call (core.Registry.Serve). v2 infer takes tensors straight to the model where
// the request names the model's inputs: the handler's pre- and postprocessing are bypassed,
// as in Triton. Where it does not, and the handler takes tensors, the handler runs, as in
// TorchServe. Errors are answered from the protocol's tables: OIPStatuses (REST) and
// frontend's gRPC codes.
package kserve

import (
	"log/slog"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/internal/tracing"
	pb "github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/repository"
)

// API is the Open Inference Protocol and KServe v1 over the registry.
type API struct {
	Registry *core.Registry
	// Repository is the Triton model repository (--model-repository), which the repository
	// API loads, unloads and indexes; without one (its control mode ""), Store does.
	Repository *repository.Repository
	Store      Store
	// Ready reports whether the start-up models are loaded and every model is healthy
	// (/v2/health/ready, ServerReady).
	Ready  func() bool
	Tracer *tracing.Tracer // nil: tracing off
	// MaxRequestSize bounds a request's body, decompressed too (max_request_size).
	MaxRequestSize int
	// LogLevel is the log's level, which the logging extension reports and changes.
	LogLevel *slog.LevelVar
}

// Store is the repository API's control of the model store, without a Triton repository.
type Store interface {
	// Index lists the loaded versions, the registrations that failed and the store's
	// archives not loaded; with ready, only the READY versions.
	Index(ready bool) []repository.Model
	Load(name string, config []byte) error
	Unload(name string) error
}

// load loads (or reloads) a model through the repository API.
func (a *API) load(name string, config []byte) error {
	if a.Repository.ControlMode() != "" {
		return a.Repository.Load(name, config)
	}
	return a.Store.Load(name, config)
}

// unload unloads a model through the repository API.
func (a *API) unload(name string) error {
	if a.Repository.ControlMode() != "" {
		return a.Repository.Unload(name)
	}
	return a.Store.Unload(name)
}

// InferenceService is the gRPC GRPCInferenceService.
func (a *API) InferenceService() pb.GRPCInferenceServiceServer { return &oipService{a: a} }
