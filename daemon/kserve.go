package daemon

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/torch"
	"github.com/valyala/fasthttp"
)

// The Open Inference Protocol (KServe v2, as Triton serves it) and KServe v1, on the
// inference port. v2 infer takes tensors straight to the model where the request names the
// model's inputs: the handler's pre- and postprocessing are bypassed, as in Triton. Where it
// does not, and the handler takes tensors, the handler runs, as in TorchServe.
func (d *Daemon) kserveRoutes() []*route {
	// Triton's extensions first: /v2/models/stats is no model named "stats".
	return append(d.tritonRoutes(), []*route{
		{method: "GET", pattern: "/v2", summary: "Server metadata", handle: d.v2Server},
		{method: "GET", pattern: "/v2/health/live", summary: "Liveness: 200", handle: func(ctx *fasthttp.RequestCtx, _ params) { ctx.SetStatusCode(200) }},
		{method: "GET", pattern: "/v2/health/ready", summary: "Readiness: 200 once start-up models are warm, else 400", handle: d.v2Ready},
		{method: "GET", pattern: "/v2/models/{model_name}", summary: "Model metadata", handle: d.v2Metadata},
		{method: "GET", pattern: "/v2/models/{model_name}/versions/{model_version}", summary: "Model metadata", handle: d.v2Metadata},
		{method: "GET", pattern: "/v2/models/{model_name}/ready", summary: "Model readiness: 200 or 400", handle: d.v2ModelReady},
		{method: "GET", pattern: "/v2/models/{model_name}/versions/{model_version}/ready", summary: "Model readiness: 200 or 400", handle: d.v2ModelReady},
		{method: "GET", pattern: "/v2/models/{model_name}/config", summary: "Triton model configuration (the subset perf_analyzer reads)", handle: d.v2Config},
		{method: "GET", pattern: "/v2/models/{model_name}/versions/{model_version}/config", summary: "Triton model configuration", handle: d.v2Config},
		{method: "POST", pattern: "/v2/models/{model_name}/infer", summary: "Inference: JSON or binary tensors", handle: d.v2Infer},
		{method: "POST", pattern: "/v2/models/{model_name}/versions/{model_version}/infer", summary: "Inference: JSON or binary tensors", handle: d.v2Infer},
		{method: "POST", pattern: "/v1/models/{model_name}:predict", summary: "KServe v1: {\"instances\": [...]} → {\"predictions\": [...]}", handle: d.v1Predict},
		{method: "POST", pattern: "/v1/models/{model_name}:explain", summary: "KServe v1: {\"instances\": [...]} → {\"explanations\": [...]} (Integrated Gradients)", handle: d.v1Explain},
		{method: "POST", pattern: "/v2/models/{model_name}/explain", summary: "KServe v2 explanation through the handler, in TorchServe's kservev2 shape", handle: d.v2Explain},
		{method: "POST", pattern: "/v2/models/{model_name}/versions/{model_version}/explain", summary: "KServe v2 explanation of a version", handle: d.v2Explain},
		{method: "GET", pattern: "/v1/models/{model_name}", summary: "KServe v1 model status", handle: d.v1Model},
	}...)
}

// v2Version picks the version segment of the v2 routes (".../versions/{v}/...").
func v2Version(p params) string {
	if len(p) > 1 {
		return p[1]
	}
	return ""
}

// v2Error answers {"error": msg} with Triton's status mapping.
func v2Error(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(oip.ErrorResponse{Error: msg})
	if status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func v2APIError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, oip.ErrBadRequest) {
		v2Error(ctx, 400, err.Error())
		return
	}
	ae := apiErrorOf(err)
	v2Error(ctx, ae.Status, ae.Msg)
}

func writeCompactJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		v2Error(ctx, 500, err.Error())
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// v2Server advertises "statistics" only while every loaded version is an integer, as over
// gRPC (see oipService.ServerMetadata): perf_analyzer, seeing it, looks for the statistics
// of the version it parses as an integer, and stops when a "1.0" has none.
func (d *Daemon) v2Server(ctx *fasthttp.RequestCtx, _ params) {
	ext := append([]string{"binary_tensor_data", "model_configuration", "schedule_policy"}, tritonExtensions...)
	if d.integerVersions() {
		ext = append(ext, "statistics")
	}
	writeCompactJSON(ctx, oip.ServerMetadata{Name: "torchd", Version: Version, Extensions: ext})
}

func (d *Daemon) v2Ready(ctx *fasthttp.RequestCtx, _ params) {
	if d.startupDone() && d.Registry.Healthy() {
		ctx.SetStatusCode(200)
		return
	}
	ctx.SetStatusCode(400)
}

func (d *Daemon) v2ModelReady(ctx *fasthttp.RequestCtx, p params) {
	v, err := d.Registry.Get(p[0], v2Version(p))
	if err != nil || !v.Ready() {
		ctx.SetStatusCode(400)
		return
	}
	ctx.SetStatusCode(200)
}

// datatypes maps the protocol's datatypes to LibTorch's; UINT16/32/64 and BYTES have no
// LibTorch 1.13 tensor type.
var datatypes = map[string]torch.DType{
	"BOOL": torch.Bool, "UINT8": torch.Uint8, "INT8": torch.Int8, "INT32": torch.Int32, "INT64": torch.Int64,
	"FP16": torch.Float16, "BF16": torch.BFloat16, "FP32": torch.Float32, "FP64": torch.Float64,
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
	if dtype == "string" {
		return "BYTES"
	}
	dt, err := torch.ParseDType(dtype)
	if err != nil {
		return strings.ToUpper(dtype)
	}
	return datatypeOf(dt)
}

// signature is a model version's inputs and outputs in the protocol's terms (core resolved
// them at load). Callers must not modify them.
func signature(v *ModelVersion) (ins, outs []oip.MetadataTensor) {
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

func (d *Daemon) v2Metadata(ctx *fasthttp.RequestCtx, p params) {
	md, err := d.modelMetadata(p[0], v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, md)
}

// modelMetadata is a model version's v2 metadata, for every protocol.
func (d *Daemon) modelMetadata(name, version string) (oip.ModelMetadata, error) {
	v, err := d.Registry.Get(name, version)
	if err != nil {
		return oip.ModelMetadata{}, err
	}
	all, _, _ := d.Registry.Versions(name)
	var versions []string
	for _, x := range all {
		versions = append(versions, x.Version)
	}
	ins, outs := signature(v)
	platform := "pytorch_libtorch"
	if tritonOf(v) != nil {
		platform = tritonOf(v).Platform()
	}
	return oip.ModelMetadata{Name: v.Name, Versions: versions, Platform: platform, Inputs: ins, Outputs: outs}, nil
}

// v2Config answers the Triton model configuration subset perf_analyzer reads. With
// max_batch_size > 0, dims leave out the batch dimension, as Triton's do.
func (d *Daemon) v2Config(ctx *fasthttp.RequestCtx, p params) {
	v, err := d.Registry.Get(p[0], v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	c := servedConfig(v)
	if tritonOf(v) != nil {
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
func servedConfig(v *ModelVersion) *inference.ModelConfig {
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
	c := &inference.ModelConfig{
		Name: v.Name, Platform: "pytorch_libtorch", Backend: "pytorch",
		VersionPolicy: &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}}},
		MaxBatchSize:  int32(bs),
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			PreferredBatchSize:        []int32{int32(bs)},
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

func kindOf(v *ModelVersion) string {
	if strings.HasPrefix(v.Module().Device(), "cuda") {
		return "KIND_GPU"
	}
	return "KIND_CPU"
}

// v2Infer decodes JSON or binary tensors, checks them against the signature, batches them
// with everyone else's requests, and answers JSON or binary outputs.
func (d *Daemon) v2Infer(ctx *fasthttp.RequestCtx, p params) {
	d.serveKServe(ctx, p[0], v2Version(p), d.v2InferVersion)
}

// serveKServe resolves the model version of a KServe inference request, serves it with
// serve, and records its status and latency.
func (d *Daemon) serveKServe(ctx *fasthttp.RequestCtx, name, version string, serve func(*fasthttp.RequestCtx, core.Call, *ModelVersion, time.Time) outcome) {
	c := restCall(ctx)
	if err := d.served(c, name, version, func(v *ModelVersion, arrived time.Time) outcome { return serve(ctx, c, v, arrived) }); err != nil {
		v2APIError(ctx, err)
	}
}

func (d *Daemon) v2InferVersion(ctx *fasthttp.RequestCtx, c core.Call, v *ModelVersion, arrived time.Time) outcome {
	rsv, fail := admit(c, v)
	if fail != nil {
		v2Error(ctx, fail.Status, fail.Msg)
		return outcome{status: fail.Status}
	}
	defer rsv.Release()
	headerLen := -1
	if h := ctx.Request.Header.Peek(oip.HeaderContentLength); len(h) > 0 {
		n, err := strconv.Atoi(string(h))
		if err != nil || n < 0 {
			v2Error(ctx, 400, fmt.Sprintf("invalid %s header %q", oip.HeaderContentLength, h))
			return outcome{status: 400}
		}
		headerLen = n
	}
	ins, outs := signature(v)
	var req *oip.InferRequest
	var tensors []oip.Tensor
	var err error
	// Binary tensors point into the body, which fasthttp reuses once the request is answered;
	// a 504 that may leave the batch still reading it takes it from fasthttp (call.keep).
	body := ctx.Request.Body()
	enc := string(ctx.Request.Header.Peek("Content-Encoding"))
	if oip.IsRaw(headerLen) {
		if len(ins) != 1 {
			v2Error(ctx, 400, fmt.Sprintf("a raw binary request needs a model with exactly one input; %s has %d", v.Name, len(ins)))
			return outcome{status: 400}
		}
		req, tensors, err = oip.DecodeRawRequest(body, enc, d.cfg.MaxRequestSize, ins[0], true)
	} else {
		req, tensors, err = oip.DecodeRequest(body, headerLen, enc, d.cfg.MaxRequestSize)
	}
	if err != nil {
		v2APIError(ctx, err)
		return outcome{status: 400}
	}
	ans, fail := d.v2Run(c, v, rsv, req, tensors, ins, outs, arrived)
	if fail != nil {
		v2Error(ctx, fail.Status, fail.Msg)
		return outcome{status: fail.Status, res: ans.res}
	}
	if ans.envelope {
		out := ans.resp.Outputs[0]
		writeCompactJSON(ctx, map[string]any{"id": ans.resp.ID, "model_name": v.Name, "model_version": v.Version, "outputs": []any{out}})
		return outcome{status: 200, res: ans.res}
	}
	body, hlen, err := oip.EncodeResponse(ans.resp, ans.outs, ans.binary)
	if err != nil {
		v2Error(ctx, 500, err.Error())
		return outcome{status: 500, res: ans.res}
	}
	if hlen >= 0 {
		ctx.Response.Header.Set(oip.HeaderContentLength, strconv.Itoa(hlen))
		ctx.SetContentType("application/octet-stream")
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.SetBody(body)
	return outcome{status: 200, res: ans.res}
}

// v2Answer is a v2 inference request's answer, for each protocol to encode: the response
// and its output tensors (binary says which go as binary data over REST); or, through the
// handler (envelope), the response with the handler's answer as its one output's JSON data.
type v2Answer struct {
	resp     *oip.InferResponse
	outs     []oip.Tensor
	binary   func(string) bool
	envelope bool
	res      core.Result // the batch's share, for the statistics
}

// v2Run serves a decoded v2 inference request that holds its place in v's queue, whatever
// the protocol: its tensors go straight to the model, or through the handler.
func (d *Daemon) v2Run(c core.Call, v *ModelVersion, rsv *core.Admission, req *oip.InferRequest, tensors []oip.Tensor, ins, outs []oip.MetadataTensor, arrived time.Time) (v2Answer, *APIError) {
	timeout, err := scheduleParams(req.Parameters)
	if err != nil {
		return v2Answer{}, apiErr(400, "BadRequestException", "%s", err.Error())
	}
	declared := v.Archive().Config.Inputs != nil
	if tp, ok := v.Handler().(handlers.TensorPreprocessor); ok && declared && !namesInputs(tensors, ins) {
		return d.v2RunHandler(c, v, rsv, req, tensors, tp, arrived, timeout)
	}
	var sample *handlers.Sample
	if ts, ok := v.Handler().(handlers.TextSampler); ok && len(tensors) == 1 && tensors[0].Datatype == "BYTES" {
		sample, err = textSample(ts, tensors[0])
	} else {
		sample, err = v2Sample(tensors, ins, declared)
	}
	if err != nil {
		return v2Answer{}, apiErr(400, "BadRequestException", "%s", err.Error())
	}
	res, fail := run(rsv, sample, arrived, timeout)
	if fail != nil {
		return v2Answer{res: res}, fail
	}
	resp, outTensors, binary, err := v2Response(v, req, res.Out, outs)
	if err != nil {
		return v2Answer{res: res}, apiErr(400, "BadRequestException", "%s", err.Error())
	}
	return v2Answer{resp: resp, outs: outTensors, binary: binary, res: res}, nil
}

// namesInputs reports whether the request names every one of the model's inputs.
func namesInputs(tensors []oip.Tensor, ins []oip.MetadataTensor) bool {
	for _, in := range ins {
		if !slices.ContainsFunc(tensors, func(t oip.Tensor) bool { return t.Name == in.Name }) {
			return false
		}
	}
	return true
}

// v2RunHandler serves a KServe v2 request as TorchServe's kservev2 envelope does: the input
// goes through the model's handler, and its answer comes back as an output named after the
// input, flattened. A tensor answer keeps its datatype; any other JSON answer is BYTES.
func (d *Daemon) v2RunHandler(c core.Call, v *ModelVersion, rsv *core.Admission, req *oip.InferRequest, tensors []oip.Tensor, tp handlers.TensorPreprocessor, arrived time.Time, timeout time.Duration) (v2Answer, *APIError) {
	if len(tensors) != 1 {
		// torchd's handlers take one input per request; TorchServe's envelope would make each
		// input a request of the handler's batch.
		return v2Answer{}, apiErr(400, "BadRequestException", "through the handler, a request takes one input, got %d; or name the model's inputs to send its tensors straight to it", len(tensors))
	}
	t := tensors[0]
	dt, ok := datatypes[t.Datatype]
	if !ok {
		return v2Answer{}, apiErr(400, "BadRequestException", "input %q: datatype %s has no LibTorch tensor type", t.Name, t.Datatype)
	}
	sample, err := tp.PreprocessTensor(handlers.Tensor{DType: dt, Shape: t.Shape, Data: t.Data})
	if err != nil {
		return v2Answer{}, apiErr(handlers.StatusOf(err, 400), "BadRequestException", "input %q: %v", t.Name, err)
	}
	res, fail := run(rsv, sample, arrived, timeout)
	if fail != nil {
		return v2Answer{res: res}, fail
	}
	resp, err := v.Handler().Postprocess(sample, res.Out)
	if err != nil {
		return v2Answer{res: res}, apiErr(handlers.StatusOf(err, 500), "InternalServerException", "%s", err.Error())
	}
	out, err := envelopeOutput(t.Name, resp.Body)
	if err != nil {
		return v2Answer{res: res}, apiErr(500, "InternalServerException", "%s", err.Error())
	}
	id := req.ID
	if strings.TrimSpace(id) == "" {
		id = newRequestID()
	}
	return v2Answer{resp: &oip.InferResponse{ModelName: v.Name, ModelVersion: v.Version, ID: id, Outputs: []oip.ResponseOutput{out}}, envelope: true, res: res}, nil
}

// envelopeOutput is TorchServe's kservev2 _to_json of a handler's answer: the answer
// flattened, named after the input, with shape [len(data)].
func envelopeOutput(name string, body []byte) (oip.ResponseOutput, error) {
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		return oip.ResponseOutput{}, errors.New("the handler's answer is not JSON, which a KServe v2 response needs")
	}
	out := oip.ResponseOutput{Name: name, Datatype: "BYTES"}
	// Answers are kept as raw JSON, so that a {label: probability} object keeps its order.
	var data []any
	var tensor struct {
		DType string `json:"dtype"`
		Shape []any  `json:"shape"`
		Data  []any  `json:"data"`
	}
	var list []json.RawMessage
	switch {
	case body[0] == '{' && json.Unmarshal(body, &tensor) == nil && tensor.DType != "" && tensor.Shape != nil && tensor.Data != nil:
		// The tensor handler's {"dtype", "shape", "data"}: its data, flattened.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		_ = dec.Decode(&tensor)
		data = flatten(tensor.Data, nil)
		out.Datatype = datatypeOfName(tensor.DType)
	case body[0] == '[' && json.Unmarshal(body, &list) == nil:
		// Nested lists of numbers (attributions) flatten to FP64, as NumPy makes Python
		// floats; a list of anything else is one BYTES item per element.
		var nested []any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		_ = dec.Decode(&nested)
		if flat := flatten(nested, nil); allNumbers(flat) {
			data, out.Datatype = flat, "FP64"
			break
		}
		for _, e := range list {
			data = append(data, e)
		}
	default:
		data = []any{json.RawMessage(body)}
	}
	out.Data, out.Shape = data, []int64{int64(len(data))}
	return out, nil
}

func allNumbers(v []any) bool {
	for _, e := range v {
		if _, ok := e.(json.Number); !ok {
			return false
		}
	}
	return len(v) > 0
}

func flatten(v []any, into []any) []any {
	for _, e := range v {
		if l, ok := e.([]any); ok {
			into = flatten(l, into)
		} else {
			into = append(into, e)
		}
	}
	return into
}

// newRequestID is a random UUID (version 4), TorchServe's id for a request that brings none.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// scheduleParams honours the schedule policy parameters: timeout (µs) becomes the request's
// deadline; priority levels are refused, as torchd's batcher has one queue.
func scheduleParams(p oip.Parameters) (time.Duration, error) {
	var timeout time.Duration
	if t, ok := p["timeout"]; ok {
		f, ok := t.(float64)
		if !ok || f < 0 {
			return 0, fmt.Errorf("parameter timeout must be a non-negative number of microseconds, got %v", t)
		}
		timeout = time.Duration(f) * time.Microsecond
	}
	if pr, ok := p["priority"]; ok {
		if f, ok := pr.(float64); !ok || f != 0 {
			return 0, fmt.Errorf("parameter priority %v is not supported: torchd has one priority level (send 0 or leave it out)", pr)
		}
	}
	return timeout, nil
}

// v2Sample orders the request's tensors as the model's inputs and checks them against the
// declared signature.
func v2Sample(tensors []oip.Tensor, ins []oip.MetadataTensor, declared bool) (*handlers.Sample, error) {
	byName := map[string]oip.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	ordered := tensors
	if declared {
		if len(tensors) != len(ins) {
			return nil, fmt.Errorf("model takes %d inputs, request has %d", len(ins), len(tensors))
		}
		ordered = make([]oip.Tensor, len(ins))
		for i, in := range ins {
			t, ok := byName[in.Name]
			if !ok {
				return nil, fmt.Errorf("missing input %q", in.Name)
			}
			if t.Datatype != in.Datatype {
				return nil, fmt.Errorf("input %q must be %s, got %s", in.Name, in.Datatype, t.Datatype)
			}
			if !shapeFits(t.Shape, in.Shape) {
				return nil, fmt.Errorf("input %q must have shape %v (-1: any), got %v", in.Name, in.Shape, t.Shape)
			}
			ordered[i] = t
		}
	}
	s := &handlers.Sample{}
	for i, t := range ordered {
		dt, ok := datatypes[t.Datatype]
		if !ok {
			return nil, fmt.Errorf("input %q: datatype %s has no LibTorch tensor type", t.Name, t.Datatype)
		}
		if len(t.Shape) == 0 || t.Shape[0] < 1 {
			return nil, fmt.Errorf("input %q: the first dimension is the batch and must be ≥ 1, got shape %v", t.Name, t.Shape)
		}
		if i == 0 {
			s.Items = int(t.Shape[0])
		} else if int(t.Shape[0]) != s.Items {
			return nil, fmt.Errorf("inputs disagree on the batch size: %d and %d", s.Items, t.Shape[0])
		}
		s.Tensors = append(s.Tensors, handlers.Tensor{DType: dt, Shape: t.Shape, Data: t.Data})
	}
	if len(s.Tensors) == 0 {
		return nil, errors.New("the request has no inputs")
	}
	return s, nil
}

// textSample hands a BYTES tensor of texts, shape [N] or [N, 1], to a handler that
// tokenizes them itself.
func textSample(ts handlers.TextSampler, t oip.Tensor) (*handlers.Sample, error) {
	if len(t.Shape) == 0 || len(t.Shape) > 2 || len(t.Shape) == 2 && t.Shape[1] != 1 {
		return nil, fmt.Errorf("input %q: BYTES texts must have shape [N] or [N, 1], got %v", t.Name, t.Shape)
	}
	var texts []string
	for b := t.Data; len(b) > 0; {
		if len(b) < 4 {
			return nil, fmt.Errorf("input %q: a BYTES element is cut short", t.Name)
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, fmt.Errorf("input %q: a BYTES element's length %d runs past the data", t.Name, n)
		}
		s := b[4 : 4+n]
		if !utf8.Valid(s) {
			return nil, fmt.Errorf("input %q: text %d is not valid UTF-8", t.Name, len(texts))
		}
		texts = append(texts, string(s))
		b = b[4+n:]
	}
	if int64(len(texts)) != t.Shape[0] {
		return nil, fmt.Errorf("input %q: shape %v but %d texts", t.Name, t.Shape, len(texts))
	}
	return ts.TextSample(texts)
}

func shapeFits(got, want []int64) bool {
	if len(want) == 0 {
		return true
	}
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if want[i] >= 0 && want[i] != got[i] {
			return false
		}
	}
	return true
}

// v2Response names the outputs, keeps the requested ones, and decides which go binary.
func v2Response(v *ModelVersion, req *oip.InferRequest, out []handlers.Tensor, decl []oip.MetadataTensor) (*oip.InferResponse, []oip.Tensor, func(string) bool, error) {
	resp := &oip.InferResponse{ModelName: v.Name, ModelVersion: v.Version, ID: req.ID}
	var tensors []oip.Tensor
	for i, t := range out {
		name := "output__" + strconv.Itoa(i)
		if i < len(decl) {
			name = decl[i].Name
		}
		tensors = append(tensors, oip.Tensor{Name: name, Datatype: datatypeOf(t.DType), Shape: t.Shape, Data: t.Data})
	}
	if len(req.Outputs) > 0 {
		byName := map[string]oip.Tensor{}
		for _, t := range tensors {
			byName[t.Name] = t
		}
		var kept []oip.Tensor
		for _, o := range req.Outputs {
			t, ok := byName[o.Name]
			if !ok {
				return nil, nil, nil, fmt.Errorf("unknown output %q requested", o.Name)
			}
			kept = append(kept, t)
		}
		tensors = kept
	}
	for _, t := range tensors {
		resp.Outputs = append(resp.Outputs, oip.ResponseOutput{Name: t.Name, Shape: t.Shape, Datatype: t.Datatype})
	}
	return resp, tensors, req.WantsBinary, nil
}

// v1Predict is KServe v1: {"instances": [...]} goes through the model's handler as one
// JSON request of len(instances) items, and the answer comes back as {"predictions": [...]}.
func (d *Daemon) v1Predict(ctx *fasthttp.RequestCtx, p params) {
	d.serveKServe(ctx, p[0], "", d.v1PredictVersion)
}

func (d *Daemon) v1PredictVersion(ctx *fasthttp.RequestCtx, c core.Call, v *ModelVersion, arrived time.Time) outcome {
	var body struct {
		Instances json.RawMessage `json:"instances"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || len(body.Instances) == 0 {
		v2Error(ctx, 400, `KServe v1 needs a JSON body {"instances": [...]}`)
		return outcome{status: 400}
	}
	req := &handlers.Request{
		Inputs:   []handlers.Payload{{Name: "body", ContentType: "application/json", Data: body.Instances}},
		Header:   func(n string) string { return string(ctx.Request.Header.Peek(n)) },
		Canceled: c.Gone,
	}
	sample, res, fail := infer(c, v, arrived, func() (*handlers.Sample, error) { return v.Preprocess(req) })
	if fail != nil {
		v2Error(ctx, fail.Status, fail.Msg)
		return outcome{status: fail.Status, res: res}
	}
	resp, err := v.Handler().Postprocess(sample, res.Out)
	if err != nil {
		v2Error(ctx, 500, err.Error())
		return outcome{status: 500, res: res}
	}
	writeCompactJSON(ctx, map[string]any{"predictions": v1Predictions(resp.Body, sample.Items)})
	return outcome{status: 200, res: res}
}

// v1Predictions turns a handler's JSON answer into one prediction per instance: an array is
// already that; a tensor answer ({"dtype", "shape", "data"}) is split into nested rows; any
// other object is the single prediction.
func v1Predictions(body []byte, items int) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return []any{string(body)}
	}
	switch x := v.(type) {
	case []any:
		return x
	case map[string]any:
		if data, ok := x["data"].([]any); ok {
			if shape, ok := x["shape"].([]any); ok && len(shape) > 0 {
				dims := make([]int, len(shape))
				for i, s := range shape {
					n, _ := strconv.Atoi(fmt.Sprint(s))
					dims[i] = n
				}
				return nest(data, dims)
			}
		}
		return []any{x}
	}
	return []any{v}
}

// nest reshapes flat row-major data into nested lists of the given dims.
func nest(data []any, dims []int) []any {
	if len(dims) == 1 {
		return data
	}
	stride := 1
	for _, d := range dims[1:] {
		stride *= d
	}
	out := make([]any, dims[0])
	for i := range out {
		if (i+1)*stride > len(data) {
			return data
		}
		out[i] = nest(data[i*stride:(i+1)*stride], dims[1:])
	}
	return out
}

func (d *Daemon) v1Model(ctx *fasthttp.RequestCtx, p params) {
	v, err := d.Registry.Get(p[0], "")
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, map[string]any{"name": v.Name, "ready": v.Ready()})
}

// v1Explain is KServe v1's explain: the instances go through the model's handler as for
// :predict, and its explanation comes back as {"explanations": [...]}, one per instance.
func (d *Daemon) v1Explain(ctx *fasthttp.RequestCtx, p params) {
	v, err := d.Registry.Get(p[0], "")
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	ex, ok := v.Handler().(handlers.Explainer)
	if !ok {
		v2Error(ctx, 501, fmt.Sprintf("model %s: its handler (%s) does not explain", v.Name, v.HandlerName))
		return
	}
	var body struct {
		Instances json.RawMessage `json:"instances"`
		Target    *int            `json:"target"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || len(body.Instances) == 0 {
		v2Error(ctx, 400, `KServe v1 needs a JSON body {"instances": [...]}`)
		return
	}
	target := 0
	if body.Target != nil {
		target = *body.Target
	}
	req := &handlers.Request{
		Inputs:   []handlers.Payload{{Name: "body", ContentType: "application/json", Data: body.Instances}},
		Header:   func(n string) string { return string(ctx.Request.Header.Peek(n)) },
		Canceled: clientGone(ctx.Conn()),
	}
	if target < 0 {
		v2Error(ctx, 400, fmt.Sprintf("target must be a class index ≥ 0, got %d", target))
		return
	}
	resp, items, err := d.runExplain(v, ex, req, target)
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	var expl any
	if err := json.Unmarshal(resp.Body, &expl); err != nil {
		v2Error(ctx, 500, "the handler's explanation is not JSON")
		return
	}
	// One instance's explanation is the handler's whole answer; several come as a list.
	if list, ok := expl.([]any); ok && items > 1 {
		writeCompactJSON(ctx, map[string]any{"explanations": list})
		return
	}
	writeCompactJSON(ctx, map[string]any{"explanations": []any{expl}})
}

// v2Explain is TorchServe's KServe v2 explain: the one input goes through a handler that
// takes tensors, and its explanation comes back as an output named after the input.
func (d *Daemon) v2Explain(ctx *fasthttp.RequestCtx, p params) {
	v, err := d.Registry.Get(p[0], v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	ex, ok := v.Handler().(handlers.Explainer)
	tp, takesTensors := v.Handler().(handlers.TensorPreprocessor)
	if !ok || !takesTensors {
		v2Error(ctx, 501, fmt.Sprintf("model %s: its handler (%s) does not explain KServe v2 tensors", v.Name, v.HandlerName))
		return
	}
	req, tensors, err := oip.DecodeRequest(ctx.Request.Body(), -1, string(ctx.Request.Header.Peek("Content-Encoding")), d.cfg.MaxRequestSize)
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	if len(tensors) != 1 {
		v2Error(ctx, 400, fmt.Sprintf("explain takes one input, got %d", len(tensors)))
		return
	}
	t := tensors[0]
	dt, ok := datatypes[t.Datatype]
	if !ok {
		v2Error(ctx, 400, fmt.Sprintf("input %q: datatype %s has no LibTorch tensor type", t.Name, t.Datatype))
		return
	}
	target := 0
	if tv, ok := req.Parameters["target"]; ok {
		f, ok := tv.(float64)
		if !ok || f < 0 || f != float64(int(f)) {
			v2Error(ctx, 400, fmt.Sprintf("parameter target must be a class index ≥ 0, got %v", tv))
			return
		}
		target = int(f)
	}
	rsv, fail := admit(restCall(ctx), v)
	if fail != nil {
		v2Error(ctx, fail.Status, fail.Msg)
		return
	}
	defer rsv.Release()
	sample, err := tp.PreprocessTensor(handlers.Tensor{DType: dt, Shape: t.Shape, Data: t.Data})
	if err != nil {
		v2Error(ctx, handlers.StatusOf(err, 400), fmt.Sprintf("input %q: %v", t.Name, err))
		return
	}
	resp, err := explainSample(v, ex, sample, target)
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	out, err := envelopeOutput(t.Name, resp.Body)
	if err != nil {
		v2Error(ctx, 500, err.Error())
		return
	}
	id := req.ID
	if strings.TrimSpace(id) == "" {
		id = newRequestID()
	}
	writeCompactJSON(ctx, map[string]any{"id": id, "model_name": v.Name, "model_version": v.Version, "outputs": []any{out}})
}
