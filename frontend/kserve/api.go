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
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// API is the Open Inference Protocol and KServe v1 over the registry.
type API struct {
	Registry *core.Registry
	// Life answers the repository API: its one index, and the load and unload of a Triton
	// repository's models (--model-repository) or, without one, the model store's.
	Life *lifecycle.Service
	// Ready reports whether the start-up models are loaded and every model is healthy
	// (/v2/health/ready, ServerReady).
	Ready  func() bool
	Tracer *tracing.Tracer // nil: tracing off
	// MaxRequestSize bounds a request's body, decompressed too (max_request_size).
	MaxRequestSize int
	// LogLevel is the log's level, which the logging extension reports and changes.
	LogLevel *slog.LevelVar
}

// InferenceService is the gRPC GRPCInferenceService.
func (a *API) InferenceService() pb.GRPCInferenceServiceServer { return &oipService{a: a} }
