// Package torchserve is TorchServe's APIs over the one core call (core.Registry.Serve): the
// inference API (/ping, /predictions, /explanations, SageMaker's /invocations) and the
// management API over REST, and both gRPC services (InferenceAPIsService, with streamed
// answers, and ManagementAPIsService). Management calls the lifecycle service, which owns
// every model's lifetime. Answers and errors are TorchServe's, from frontend's table of the
// core's kinds.
package torchserve

import (
	"log/slog"
	"os"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/internal/tracing"
	"github.com/torchd/torchd/lifecycle"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// API is TorchServe's inference and management APIs over the registry.
type API struct {
	Registry *core.Registry
	// Life registers, scales and unregisters model versions, and keeps the snapshot's
	// registrations that failed to restore.
	Life *lifecycle.Service
	// InitialWorkers are the workers a registration through TorchServe's management API
	// (REST or gRPC) starts when neither it (initial_workers), the archive, nor the server's
	// workers setting names a count: 0 is TorchServe's default; 1 serves at once.
	InitialWorkers int
	// Ready reports whether the start-up models are loaded and every model is healthy
	// (/ping, gRPC Ping).
	Ready  func() bool
	Tracer *tracing.Tracer // nil: tracing off
	// MaxRequestSize bounds a request's body, decompressed too (max_request_size).
	MaxRequestSize int
	Log            *slog.Logger
}

var pid = os.Getpid()

// InferenceRoutes are the inference API's REST routes.
func (a *API) InferenceRoutes() []*frontend.Route {
	return []*frontend.Route{
		{Method: "GET", Pattern: "/ping", Summary: "Health: 200 once every start-up model is warm, else 500", Handle: a.ping},
		{Method: "POST", Pattern: "/predictions/{model_name}", Summary: "Predict with the default version", Handle: a.predictRoute},
		{Method: "POST", Pattern: "/predictions/{model_name}/{model_version}", Summary: "Predict with a version", Handle: a.predictRoute},
		{Method: "PUT", Pattern: "/predictions/{model_name}", Summary: "Predict with the default version", Handle: a.predictRoute},
		{Method: "PUT", Pattern: "/predictions/{model_name}/{model_version}", Summary: "Predict with a version", Handle: a.predictRoute},
		{Method: "POST", Pattern: "/explanations/{model_name}", Summary: "Integrated Gradients of the target class (image and text classifiers; 501 for other handlers)", Handle: a.explain},
		{Method: "POST", Pattern: "/explanations/{model_name}/{model_version}", Summary: "Integrated Gradients of a version", Handle: a.explain},
		// TorchServe takes any method on its inference paths; its READMEs send files with curl -T (PUT).
		{Method: "PUT", Pattern: "/explanations/{model_name}", Summary: "Integrated Gradients of the target class", Handle: a.explain},
		{Method: "PUT", Pattern: "/explanations/{model_name}/{model_version}", Summary: "Integrated Gradients of a version", Handle: a.explain},
		{Method: "POST", Pattern: "/invocations", Summary: "SageMaker-style predict; ?model_name= or the only model", Handle: a.invocations},
		{Method: "POST", Pattern: "/models/{model_name}/invoke", Summary: "SageMaker-style predict", Handle: a.predictRoute},
	}
}

// ManagementRoutes are the management API's REST routes.
func (a *API) ManagementRoutes() []*frontend.Route {
	return []*frontend.Route{
		{Method: "POST", Pattern: "/models", Summary: "Register a model: url, model_name, handler, runtime, batch_size, max_batch_delay, initial_workers (each a number or auto), latency_target_ms, threads, precision (fp32, bf16, fp16 or int8 for an archive with a package in it, or auto: the fastest the CPU computes natively), synchronous, response_timeout, startup_timeout", Handle: a.register},
		{Method: "GET", Pattern: "/models", Summary: "List models: limit, next_page_token", Handle: a.list},
		{Method: "GET", Pattern: "/models/{model_name}", Summary: "Describe the default version", Handle: a.describe},
		{Method: "GET", Pattern: "/models/{model_name}/{model_version}", Summary: "Describe a version, or every version with 'all'", Handle: a.describe},
		{Method: "PUT", Pattern: "/models/{model_name}", Summary: "Scale workers: min_worker, max_worker, synchronous", Handle: a.scale},
		{Method: "PUT", Pattern: "/models/{model_name}/{model_version}", Summary: "Scale a version's workers", Handle: a.scale},
		{Method: "DELETE", Pattern: "/models/{model_name}", Summary: "Unregister the default version", Handle: a.unregister},
		{Method: "DELETE", Pattern: "/models/{model_name}/{model_version}", Summary: "Unregister a version", Handle: a.unregister},
		{Method: "PUT", Pattern: "/models/{model_name}/{model_version}/set-default", Summary: "Make a version the default", Handle: a.setDefault},
	}
}

// InferenceService is the gRPC InferenceAPIsService.
func (a *API) InferenceService() tspb.InferenceAPIsServiceServer {
	return &tsInferenceService{a: a}
}

// ManagementService is the gRPC ManagementAPIsService.
func (a *API) ManagementService() tspb.ManagementAPIsServiceServer {
	return &tsManagementService{a: a}
}
