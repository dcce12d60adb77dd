package kserve

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/oip"
	"github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/repository"
	"github.com/torchd/torchd/torch"
	"github.com/valyala/fasthttp"
)

// Routes are the Open Inference Protocol's (KServe v2, as Triton serves it, with Triton's
// extensions) and KServe v1's, on the inference port. A refused key is answered in their
// shape, 400 {"error": msg}, as KServe's and Triton's errors are.
func (a *API) Routes() []*frontend.Route {
	// Triton's extensions first: /v2/models/stats is no model named "stats".
	return frontend.WithUnauthorized(append(a.tritonRoutes(), []*frontend.Route{
		{Method: "GET", Pattern: "/v2", Summary: "Server metadata", Handle: a.v2Server},
		{Method: "GET", Pattern: "/v2/health/live", Summary: "Liveness: 200", Handle: func(ctx *fasthttp.RequestCtx, _ frontend.Params) { ctx.SetStatusCode(200) }},
		{Method: "GET", Pattern: "/v2/health/ready", Summary: "Readiness: 200 once start-up models are warm, else 400", Handle: a.v2Ready},
		{Method: "GET", Pattern: "/v2/models/{model_name}", Summary: "Model metadata", Handle: a.v2Metadata},
		{Method: "GET", Pattern: "/v2/models/{model_name}/versions/{model_version}", Summary: "Model metadata", Handle: a.v2Metadata},
		{Method: "GET", Pattern: "/v2/models/{model_name}/ready", Summary: "Model readiness: 200 or 400", Handle: a.v2ModelReady},
		{Method: "GET", Pattern: "/v2/models/{model_name}/versions/{model_version}/ready", Summary: "Model readiness: 200 or 400", Handle: a.v2ModelReady},
		{Method: "GET", Pattern: "/v2/models/{model_name}/config", Summary: "Triton model configuration (the subset perf_analyzer reads)", Handle: a.v2Config},
		{Method: "GET", Pattern: "/v2/models/{model_name}/versions/{model_version}/config", Summary: "Triton model configuration", Handle: a.v2Config},
		{Method: "POST", Pattern: "/v2/models/{model_name}/infer", Summary: "Inference: JSON or binary tensors", Handle: a.v2Infer},
		{Method: "POST", Pattern: "/v2/models/{model_name}/versions/{model_version}/infer", Summary: "Inference: JSON or binary tensors", Handle: a.v2Infer},
		{Method: "POST", Pattern: "/v1/models/{model_name}:predict", Summary: "KServe v1: {\"instances\": [...]} → {\"predictions\": [...]}", Handle: a.v1Predict},
		{Method: "POST", Pattern: "/v1/models/{model_name}:explain", Summary: "KServe v1: {\"instances\": [...]} → {\"explanations\": [...]} (Integrated Gradients)", Handle: a.v1Explain},
		{Method: "POST", Pattern: "/v2/models/{model_name}/explain", Summary: "KServe v2 explanation through the handler, in TorchServe's kservev2 shape", Handle: a.v2Explain},
		{Method: "POST", Pattern: "/v2/models/{model_name}/versions/{model_version}/explain", Summary: "KServe v2 explanation of a version", Handle: a.v2Explain},
		{Method: "GET", Pattern: "/v1/models/{model_name}", Summary: "KServe v1 model status", Handle: a.v1Model},
	}...), func(ctx *fasthttp.RequestCtx, msg string) { WriteError(ctx, 400, msg) })
}

// v2Version picks the version segment of the v2 routes (".../versions/{v}/...").
func v2Version(p frontend.Params) string {
	if len(p) > 1 {
		return p[1]
	}
	return ""
}

// WriteError answers {"error": msg} with Triton's status mapping.
func WriteError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(oip.ErrorResponse{Error: msg})
	if status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// v2APIError answers err in the Open Inference Protocol's shape, {"error": msg}, under
// v2Status's status.
func v2APIError(ctx *fasthttp.RequestCtx, err error) {
	WriteError(ctx, v2Status(err), err.Error())
}

// v2Status is the HTTP status of the Open Inference Protocol's answer (KServe v1 and v2,
// Triton's extensions) to err: the code a handler gave its own error, or by its kind
// (OIPStatuses); a malformed request is 400, anything else 500.
func v2Status(err error) int {
	var ce *core.Error
	if errors.As(err, &ce) && ce.HandlerCode != 0 {
		return ce.HandlerCode
	}
	if status, ok := OIPStatuses.Of(err); ok {
		return status
	}
	var ae *frontend.APIError
	switch {
	case errors.As(err, &ae):
		return ae.Status
	case errors.Is(err, oip.ErrBadRequest):
		return 400
	}
	return 500
}

// OIPStatuses is the Open Inference Protocol's table (KServe v1 and v2 over REST, Triton's
// extensions): the core's kinds as HTTP statuses.
var OIPStatuses = frontend.KindTable[int]{
	{Kind: core.ErrModelNotFound, Answer: 404},
	{Kind: core.ErrVersionNotFound, Answer: 404},
	{Kind: core.ErrLoading, Answer: 503},
	{Kind: core.ErrConflict, Answer: 409},
	{Kind: core.ErrDefaultVersion, Answer: 403},
	{Kind: core.ErrBadModel, Answer: 400},
	{Kind: core.ErrLoadFailed, Answer: 500},
	{Kind: core.ErrStartupTimeout, Answer: 500},
	{Kind: core.ErrBadInput, Answer: 400},
	{Kind: core.ErrTooLarge, Answer: 413},
	{Kind: core.ErrUnsupported, Answer: 501},
	{Kind: core.ErrQueueFull, Answer: 503},
	{Kind: core.ErrNoWorker, Answer: 503},
	{Kind: core.ErrUnregistered, Answer: 503},
	{Kind: core.ErrDeadline, Answer: 504},
	{Kind: core.ErrClientGone, Answer: frontend.StatusClientClosed},
	{Kind: core.ErrInference, Answer: 500},
	{Kind: core.ErrControlOff, Answer: 503},
}

func writeCompactJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(ctx, 500, err.Error())
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// v2Server advertises "statistics" only while every loaded version is an integer, as over
// gRPC (see oipService.ServerMetadata): perf_analyzer, seeing it, looks for the statistics
// of the version it parses as an integer, and stops when a "1.0" has none.
func (a *API) v2Server(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	ext := append([]string{"binary_tensor_data", "model_configuration", "schedule_policy"}, tritonExtensions...)
	if a.integerVersions() {
		ext = append(ext, "statistics")
	}
	writeCompactJSON(ctx, oip.ServerMetadata{Name: "torchd", Version: frontend.Version, Extensions: ext})
}

func (a *API) v2Ready(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	if a.Ready() {
		ctx.SetStatusCode(200)
		return
	}
	ctx.SetStatusCode(400)
}

func (a *API) v2ModelReady(ctx *fasthttp.RequestCtx, p frontend.Params) {
	v, err := a.Registry.Get(p[0], v2Version(p))
	if err != nil || !v.Ready() {
		ctx.SetStatusCode(400)
		return
	}
	ctx.SetStatusCode(200)
}

// datatypes maps the protocol's datatypes to torchd's tensor types; UINT16/32/64 have none.
// BYTES is a tensor of strings (torch.Bytes, the protocol's own layout), which the runtimes
// that take strings read (ONNX Runtime, Triton's Python backend) and LibTorch refuses.
var datatypes = map[string]torch.DType{
	"BOOL": torch.Bool, "UINT8": torch.Uint8, "INT8": torch.Int8, "INT32": torch.Int32, "INT64": torch.Int64,
	"FP16": torch.Float16, "BF16": torch.BFloat16, "FP32": torch.Float32, "FP64": torch.Float64, "BYTES": torch.Bytes, "INT16": torch.Int16,
}

func datatypeOf(dt torch.DType) string {
	for k, v := range datatypes {
		if v == dt {
			return k
		}
	}
	return "BYTES"
}

func datatypeOfName(dtype string) string {
	// Every request asks (its model's signature, in and out): ParseDType walks a map.
	if d, ok := datatypeNames.Load(dtype); ok {
		return d.(string)
	}
	d := "BYTES"
	if dtype != "string" {
		dt, err := torch.ParseDType(dtype)
		if err != nil {
			d = strings.ToUpper(dtype)
		} else {
			d = datatypeOf(dt)
		}
	}
	datatypeNames.Store(dtype, d)
	return d
}

// datatypeNames caches datatypeOfName: dtype names are the loaded models' signatures', few.
var datatypeNames sync.Map

// signature is a model version's inputs and outputs in the protocol's terms (core resolved
// them at load). Callers must not modify them.
func signature(v *core.ModelVersion) (ins, outs []oip.MetadataTensor) {
	cin, cout := v.Signature()
	return metadataTensors(cin), metadataTensors(cout)
}

func metadataTensors(specs []archive.TensorSpec) []oip.MetadataTensor {
	out := make([]oip.MetadataTensor, len(specs))
	for i, s := range specs {
		out[i] = oip.MetadataTensor{Name: s.Name, Datatype: datatypeOfName(s.DType), Shape: s.Shape}
	}
	return out
}

func (a *API) v2Metadata(ctx *fasthttp.RequestCtx, p frontend.Params) {
	md, err := a.modelMetadata(p[0], v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, md)
}

// modelMetadata is a model version's v2 metadata, for every protocol.
func (a *API) modelMetadata(name, version string) (oip.ModelMetadata, error) {
	v, err := a.Registry.Get(name, version)
	if err != nil {
		return oip.ModelMetadata{}, err
	}
	all, _, _ := a.Registry.Versions(name)
	var versions []string
	for _, x := range all {
		versions = append(versions, x.Version)
	}
	ins, outs := signature(v)
	platform := "pytorch_libtorch"
	if t := repository.AdapterOf(v); t != nil {
		platform = t.Platform()
	}
	return oip.ModelMetadata{Name: v.Name, Versions: versions, Platform: platform, Inputs: ins, Outputs: outs}, nil
}

// v2Config answers the Triton model configuration subset perf_analyzer reads. With
// max_batch_size > 0, dims leave out the batch dimension, as Triton's do.
func (a *API) v2Config(ctx *fasthttp.RequestCtx, p frontend.Params) {
	v, err := a.Registry.Get(p[0], v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	c := servedConfig(v)
	if repository.AdapterOf(v) != nil {
		writeCompactJSON(ctx, configJSON(c))
		return
	}
	tensor := func(name string, dt inference.DataType, dims []int64) map[string]any {
		return map[string]any{"name": name, "data_type": dt.String(), "dims": dims}
	}
	ins := make([]map[string]any, 0, len(c.Input))
	for _, t := range c.Input {
		ins = append(ins, tensor(t.Name, t.DataType, t.Dims))
	}
	outs := make([]map[string]any, 0, len(c.Output))
	for _, t := range c.Output {
		outs = append(outs, tensor(t.Name, t.DataType, t.Dims))
	}
	g := c.InstanceGroup[0]
	writeCompactJSON(ctx, map[string]any{
		"name": c.Name, "platform": c.Platform, "backend": c.Backend,
		"version_policy": map[string]any{"latest": map[string]uint32{"num_versions": c.GetVersionPolicy().GetLatest().GetNumVersions()}},
		"max_batch_size": c.MaxBatchSize,
		"input":          ins, "output": outs,
		"dynamic_batching": map[string]any{
			"preferred_batch_size":         c.GetDynamicBatching().GetPreferredBatchSize(),
			"max_queue_delay_microseconds": c.GetDynamicBatching().GetMaxQueueDelayMicroseconds(),
		},
		"instance_group": []map[string]any{{"count": g.Count, "kind": g.Kind.String()}},
	})
}

// servedConfig is the Triton model configuration a version is served with: a repository
// model's own, else one made from its signature and batching settings.
func servedConfig(v *core.ModelVersion) *inference.ModelConfig {
	if c := tritonConfig(v); c != nil {
		return c
	}
	ins, outs := signature(v)
	dt := func(datatype string) inference.DataType {
		if datatype == "BYTES" {
			return inference.DataType_TYPE_STRING
		}
		return inference.DataType(inference.DataType_value["TYPE_"+datatype])
	}
	// With max_batch_size > 0, dims leave out the batch dimension, as Triton's do.
	dims := func(shape []int64) []int64 {
		if len(shape) > 0 {
			return shape[1:]
		}
		return shape
	}
	bs, delay := v.Batching()
	// Without preferred sizes a batch goes when it holds the batch size, as Triton's does
	// when that is its one preferred size.
	preferred := []int32{int32(bs)}
	if p := v.Settings().PreferredBatchSize; len(p) > 0 {
		preferred = preferred[:0]
		for _, n := range p {
			if n <= bs {
				preferred = append(preferred, int32(n))
			}
		}
	}
	c := &inference.ModelConfig{
		Name: v.Name, Platform: "pytorch_libtorch", Backend: "pytorch",
		VersionPolicy: &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}}},
		MaxBatchSize:  int32(bs),
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			PreferredBatchSize:        preferred,
			MaxQueueDelayMicroseconds: uint64(delay.Microseconds()),
		}},
		InstanceGroup: []*inference.ModelInstanceGroup{{Count: int32(v.WorkerCount()), Kind: inference.ModelInstanceGroup_Kind(inference.ModelInstanceGroup_Kind_value[kindOf(v)])}},
	}
	for _, t := range ins {
		c.Input = append(c.Input, &inference.ModelInput{Name: t.Name, DataType: dt(t.Datatype), Dims: dims(t.Shape)})
	}
	for _, t := range outs {
		c.Output = append(c.Output, &inference.ModelOutput{Name: t.Name, DataType: dt(t.Datatype), Dims: dims(t.Shape)})
	}
	return c
}

func kindOf(v *core.ModelVersion) string {
	if strings.HasPrefix(v.Model().Device(), "cuda") {
		return "KIND_GPU"
	}
	return "KIND_CPU"
}
