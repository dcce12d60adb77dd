package kserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/valyala/fasthttp"
)

// KServe v1 (predict, explain) and v2 explain: through the model's handler.

// v1Predict is KServe v1: {"instances": [...]} goes through the model's handler as one
// JSON request of len(instances) items, and the answer comes back as {"predictions": [...]}.
func (a *API) v1Predict(ctx *fasthttp.RequestCtx, p frontend.Params) {
	c := frontend.RESTCall(ctx)
	frontend.TraceREST(a.Tracer, ctx, &c, "kserve_v1", "/v1/models/{model_name}:predict")
	_, err := a.Registry.Serve(&core.Request{Model: p[0], Call: c,
		Decode: func(v *core.ModelVersion) (core.Input, error) { return v1Input(ctx, c, v) },
		Encode: func(res *core.Result) error {
			return writeV1(ctx, map[string]any{"predictions": v1Predictions(res.Response.Body, res.Sample.Items)})
		}})
	if err != nil {
		v2APIError(ctx, err)
	}
}

// v1Input is a KServe v1 body's instances, as one JSON payload for the model's handler; or,
// for a handler that takes rows (a Python handler), as TorchServe's kserve envelope hands
// them: each instance a row of the batch, an object's keys its fields.
func v1Input(ctx *fasthttp.RequestCtx, c core.Call, v *core.ModelVersion) (core.Input, error) {
	var body struct {
		Instances json.RawMessage `json:"instances"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || len(body.Instances) == 0 {
		return core.Input{}, errors.New(`KServe v1 needs a JSON body {"instances": [...]}`)
	}
	req := &handlers.Request{
		Inputs:   []handlers.Payload{{Name: "body", ContentType: "application/json", Data: body.Instances}},
		Header:   func(n string) string { return string(ctx.Request.Header.Peek(n)) },
		Canceled: c.Gone,
	}
	if handlers.TakesRows(v.Handler()) {
		rows, err := instanceRows(body.Instances)
		if err != nil {
			return core.Input{}, err
		}
		req.Inputs, req.Rows = nil, rows
		req.Headers = func(yield func(string, string) bool) {
			for k, v := range ctx.Request.Header.All() {
				if !yield(string(k), string(v)) {
					return
				}
			}
		}
	}
	return core.Input{Payloads: req}, nil
}

// instanceRows makes each instance a row: an object's keys are its fields, each with its
// JSON value (which the handler sees decoded); any other instance is the row's "body".
func instanceRows(instances json.RawMessage) ([][]handlers.Payload, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(instances, &list); err != nil || len(list) == 0 {
		return nil, errors.New(`KServe v1's "instances" must be a list of at least one instance`)
	}
	rows := make([][]handlers.Payload, len(list))
	for i, inst := range list {
		inst = bytes.TrimSpace(inst)
		if len(inst) > 0 && inst[0] == '{' {
			fields, err := objectFields(inst)
			if err != nil {
				return nil, fmt.Errorf("instance %d: %v", i, err)
			}
			rows[i] = fields
			continue
		}
		rows[i] = []handlers.Payload{{Name: "body", ContentType: "application/json", Data: inst}}
	}
	return rows, nil
}

// objectFields are a JSON object's members in their order, each as a JSON payload.
func objectFields(obj json.RawMessage) ([]handlers.Payload, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var fields []handlers.Payload
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		fields = append(fields, handlers.Payload{Name: key, ContentType: "application/json", Data: val})
	}
	return fields, nil
}

// writeV1 answers v as compact JSON, within the core call.
func writeV1(ctx *fasthttp.RequestCtx, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
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

func (a *API) v1Model(ctx *fasthttp.RequestCtx, p frontend.Params) {
	v, err := a.Registry.Get(p[0], "")
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, map[string]any{"name": v.Name, "ready": v.Ready()})
}

// v1Explain is KServe v1's explain: the instances go through the model's handler as for
// :predict, and its explanation comes back as {"explanations": [...]}, one per instance.
func (a *API) v1Explain(ctx *fasthttp.RequestCtx, p frontend.Params) {
	c := frontend.RESTCall(ctx)
	_, err := a.Registry.Serve(&core.Request{Model: p[0], Call: c, Explain: true,
		Decode: func(v *core.ModelVersion) (core.Input, error) {
			in, err := v1Input(ctx, c, v)
			if err != nil || in.Payloads.Rows != nil {
				// A handler that takes rows reads each instance's target itself.
				return in, err
			}
			var body struct {
				Target *int `json:"target"`
			}
			if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
				return in, errors.New(`KServe v1 needs a JSON body {"instances": [...]}`)
			}
			if body.Target != nil {
				if *body.Target < 0 {
					return in, fmt.Errorf("target must be a class index ≥ 0, got %d", *body.Target)
				}
				in.Target = *body.Target
			}
			return in, nil
		},
		Encode: func(res *core.Result) error {
			var expl any
			if err := json.Unmarshal(res.Response.Body, &expl); err != nil {
				return errors.New("the handler's explanation is not JSON")
			}
			// One instance's explanation is the handler's whole answer; several come as a list,
			// as do the rows' answers of a handler that takes rows.
			rows := handlers.TakesRows(res.Version.Handler())
			if list, ok := expl.([]any); ok && (res.Sample.Items > 1 || rows) {
				return writeV1(ctx, map[string]any{"explanations": list})
			}
			return writeV1(ctx, map[string]any{"explanations": []any{expl}})
		}})
	if err != nil {
		v2APIError(ctx, err)
	}
}

// v2Explain is TorchServe's KServe v2 explain: the one input goes through a handler that
// takes tensors, and its explanation comes back as an output named after the input.
func (a *API) v2Explain(ctx *fasthttp.RequestCtx, p frontend.Params) {
	var req *oip.InferRequest
	var input string
	var inputs []string // the inputs, in order, as rows of a handler that takes rows
	_, err := a.Registry.Serve(&core.Request{Model: p[0], Version: v2Version(p), Call: frontend.RESTCall(ctx), Explain: true,
		Check: func(v *core.ModelVersion) error {
			if handlers.TakesRows(v.Handler()) {
				return nil // the core asks the model whether it explains
			}
			_, explains := v.Handler().(handlers.Explainer)
			if _, ok := v.Handler().(handlers.TensorPreprocessor); !ok || !explains {
				return core.Errorf(core.ErrUnsupported, "model %s: its handler (%s) does not explain KServe v2 tensors", v.Name, v.HandlerName)
			}
			return nil
		},
		Decode: func(v *core.ModelVersion) (core.Input, error) {
			r, tensors, err := oip.DecodeRequest(ctx.Request.Body(), -1, string(ctx.Request.Header.Peek("Content-Encoding")), a.MaxRequestSize)
			if err != nil {
				return core.Input{}, err
			}
			req = r
			if handlers.TakesRows(v.Handler()) {
				rows, names, err := inputRows(tensors)
				inputs = names
				return core.Input{Payloads: &handlers.Request{Rows: rows, Header: func(string) string { return "" }}}, err
			}
			t, err := handlerTensor(tensors, "explain takes one input, got %d")
			if err != nil {
				return core.Input{}, err
			}
			input = t.Name
			target := 0
			if tv, ok := req.Parameters["target"]; ok {
				f, ok := tv.(float64)
				if !ok || f < 0 || f != float64(int(f)) {
					return core.Input{}, fmt.Errorf("parameter target must be a class index ≥ 0, got %v", tv)
				}
				target = int(f)
			}
			return core.Input{Tensor: t, Target: target}, nil
		},
		Encode: func(res *core.Result) error {
			if inputs != nil {
				ans, err := rowsAnswer(res.Version, req, inputs, res.Response.Body)
				if err != nil {
					return err
				}
				return writeV1(ctx, map[string]any{"id": ans.resp.ID, "model_name": res.Version.Name, "model_version": res.Version.Version, "outputs": ans.resp.Outputs})
			}
			ans, err := envelopeAnswer(res.Version, req, input, res.Response.Body)
			if err != nil {
				return err
			}
			return writeV1(ctx, map[string]any{"id": ans.resp.ID, "model_name": res.Version.Name, "model_version": res.Version.Version, "outputs": []any{ans.resp.Outputs[0]}})
		}})
	if err != nil {
		v2APIError(ctx, err)
	}
}
