package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/valyala/fasthttp"
)

// KServe v1 (predict, explain) and v2 explain: through the model's handler.

// v1Predict is KServe v1: {"instances": [...]} goes through the model's handler as one
// JSON request of len(instances) items, and the answer comes back as {"predictions": [...]}.
func (d *Daemon) v1Predict(ctx *fasthttp.RequestCtx, p params) {
	d.serveKServe(ctx, "kserve_v1", "/v1/models/{model_name}:predict", p[0], "", d.v1PredictVersion)
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
	post := traceStart(c)
	resp, err := v.Handler().Postprocess(sample, res.Out)
	traceStage(c, "postprocess", post, err)
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
