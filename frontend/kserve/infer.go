package kserve

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/oip"
	"github.com/torchd/torchd/repository"
	"github.com/valyala/fasthttp"
)

// v2 inference, over REST here and over gRPC (grpc.go): decode, one core.Registry.Serve,
// encode.

// v2Infer decodes JSON or binary tensors, checks them against the signature, batches them
// with everyone else's requests, and answers JSON or binary outputs.
func (a *API) v2Infer(ctx *fasthttp.RequestCtx, p frontend.Params) {
	c := frontend.RESTCall(ctx)
	frontend.TraceREST(a.Tracer, ctx, &c, "kserve_v2", "/v2/models/{model_name}/infer")
	decode := func(v *core.ModelVersion, ins []oip.MetadataTensor) (*oip.InferRequest, []oip.Tensor, error) {
		headerLen := -1
		if h := ctx.Request.Header.Peek(oip.HeaderContentLength); len(h) > 0 {
			n, err := strconv.Atoi(string(h))
			if err != nil || n < 0 {
				return nil, nil, fmt.Errorf("invalid %s header %q", oip.HeaderContentLength, h)
			}
			headerLen = n
		}
		// Binary tensors point into the body, which fasthttp reuses once the request is
		// answered; a 504 that may leave the batch still reading it takes it from fasthttp
		// (Call.Keep).
		body := ctx.Request.Body()
		enc := string(ctx.Request.Header.Peek("Content-Encoding"))
		if oip.IsRaw(headerLen) {
			if len(ins) != 1 {
				return nil, nil, fmt.Errorf("a raw binary request needs a model with exactly one input; %s has %d", v.Name, len(ins))
			}
			return oip.DecodeRawRequest(body, enc, a.MaxRequestSize, ins[0], true)
		}
		return oip.DecodeRequest(body, headerLen, enc, a.MaxRequestSize)
	}
	err := a.v2Serve(c, p[0], v2Version(p), decode, func(v *core.ModelVersion, ans v2Answer) error {
		if ans.envelope {
			b, err := json.Marshal(map[string]any{"id": ans.resp.ID, "model_name": v.Name, "model_version": v.Version, "outputs": ans.resp.Outputs})
			if err != nil {
				return err
			}
			ctx.SetContentType("application/json")
			ctx.SetBody(b)
			return nil
		}
		body, hlen, err := oip.EncodeResponse(ans.resp, ans.outs, ans.binary)
		if err != nil {
			return err
		}
		if hlen >= 0 {
			ctx.Response.Header.Set(oip.HeaderContentLength, strconv.Itoa(hlen))
			ctx.SetContentType("application/octet-stream")
		} else {
			ctx.SetContentType("application/json")
		}
		ctx.SetBody(body)
		return nil
	})
	if err != nil {
		v2APIError(ctx, err)
	}
}

// v2Answer is a v2 inference request's answer, for each protocol to encode: the response
// and its output tensors (binary says which go as binary data over REST); or, through the
// handler (envelope), the response with the handler's answer as its one output's JSON data.
type v2Answer struct {
	resp     *oip.InferResponse
	outs     []oip.Tensor
	binary   func(string) bool
	envelope bool
}

// v2Serve serves a v2 inference request, whatever its transport, in one core call: decode
// reads the request's tensors once it holds its place in the model's queue; they go straight
// to the model, or through its handler; encode turns the answer into the transport's, within
// the call.
func (a *API) v2Serve(c core.Call, name, version string, decode func(v *core.ModelVersion, ins []oip.MetadataTensor) (*oip.InferRequest, []oip.Tensor, error), encode func(v *core.ModelVersion, ans v2Answer) error) error {
	var req *oip.InferRequest
	var input string    // the input named in the handler's answer (envelope)
	var inputs []string // the inputs, in order, as rows of a handler that takes rows
	_, err := a.Registry.Serve(&core.Request{Model: name, Version: version, Call: c,
		Decode: func(v *core.ModelVersion) (core.Input, error) {
			cin, _ := v.Signature()
			ins := metadataTensors(cin) // the inputs alone: a request converts what it reads
			r, tensors, err := decode(v, ins)
			if err != nil {
				return core.Input{}, err
			}
			req = r
			timeout, err := scheduleParams(r.Parameters)
			if err != nil {
				return core.Input{}, err
			}
			if handlers.TakesRows(v.Handler()) {
				rows, names, err := inputRows(tensors)
				inputs = names
				return core.Input{Payloads: &handlers.Request{Rows: rows, Header: func(string) string { return "" }}, Timeout: timeout}, err
			}
			declared := v.Archive().Config.Inputs != nil
			_, texts := v.Handler().(handlers.TextSampler)
			_, takesTensors := v.Handler().(handlers.TensorPreprocessor)
			// A model whose inputs are unknown (none declared, and forward takes no plain
			// tensors: a detector's list of images) is fed only through its handler. No model
			// takes BYTES: they are the handler's payloads (an image, a text), as TorchServe's
			// envelope hands a BYTES input's data to the handler.
			bytesIn := len(tensors) > 0 && tensors[0].Datatype == "BYTES"
			viaHandler := takesTensors && (declared && !namesInputs(tensors, ins) || !declared && len(ins) == 0)
			if viaHandler || !texts && bytesIn && (len(ins) == 0 || !namesInputs(tensors, ins)) {
				if len(tensors) == 1 && bytesIn {
					input = tensors[0].Name
					p, err := bytesPayloads(tensors[0])
					return core.Input{Payloads: p, Timeout: timeout}, err
				}
				t, err := handlerTensor(tensors, "through the handler, a request takes one input, got %d; or name the model's inputs to send its tensors straight to it")
				input = t.Name
				return core.Input{Tensor: t, Timeout: timeout}, err
			}
			var sample *handlers.Sample
			if ts, ok := v.Handler().(handlers.TextSampler); ok && len(tensors) == 1 && tensors[0].Datatype == "BYTES" {
				sample, err = textSample(ts, tensors[0])
			} else {
				sample, err = v2Sample(tensors, ins, declared)
			}
			return core.Input{Sample: sample, Timeout: timeout}, err
		},
		Encode: func(res *core.Result) error {
			v := res.Version
			if inputs != nil {
				ans, err := rowsAnswer(v, req, inputs, res.Response.Body)
				if err != nil {
					return err
				}
				return encode(v, ans)
			}
			if res.Response != nil {
				ans, err := envelopeAnswer(v, req, input, res.Response.Body)
				if err != nil {
					return err
				}
				return encode(v, ans)
			}
			_, cout := v.Signature()
			outs := metadataTensors(cout)
			resp, outTensors, binary, err := v2Response(v, req, res.Out, outs)
			if err != nil {
				return core.WithKind(err, core.ErrBadInput)
			}
			return encode(v, v2Answer{resp: resp, outs: outTensors, binary: binary})
		}})
	return err
}

// handlerTensor is the one tensor of a request that goes through the model's handler, as a
// handler's tensor; tooMany words the error for more than one (%d: their number).
func handlerTensor(tensors []oip.Tensor, tooMany string) (*handlers.Tensor, error) {
	if len(tensors) != 1 {
		// torchd's handlers take one input per request; TorchServe's envelope would make each
		// input a request of the handler's batch.
		return &handlers.Tensor{}, fmt.Errorf(tooMany, len(tensors))
	}
	t := tensors[0]
	dt, ok := datatypes[t.Datatype]
	if !ok {
		return &handlers.Tensor{Name: t.Name}, fmt.Errorf("input %q: datatype %s has no tensor type in torchd", t.Name, t.Datatype)
	}
	return &handlers.Tensor{DType: dt, Shape: t.Shape, Data: t.Data, Name: t.Name}, nil
}

// envelopeAnswer is the handler's answer to a v2 request in TorchServe's kservev2 envelope:
// one output named after the input, the answer flattened. A tensor answer keeps its
// datatype; any other JSON answer is BYTES.
func envelopeAnswer(v *core.ModelVersion, req *oip.InferRequest, input string, body []byte) (v2Answer, error) {
	out, err := envelopeOutput(input, body)
	if err != nil {
		return v2Answer{}, err
	}
	id := req.ID
	if strings.TrimSpace(id) == "" {
		id = newRequestID()
	}
	return v2Answer{resp: &oip.InferResponse{ModelName: v.Name, ModelVersion: v.Version, ID: id, Outputs: []oip.ResponseOutput{out}}, envelope: true}, nil
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

// v2Sample orders the request's tensors as the model's inputs (by name) and checks them
// against the declared signature.
func v2Sample(tensors []oip.Tensor, ins []oip.MetadataTensor, declared bool) (*handlers.Sample, error) {
	// A request's few tensors are looked up by name without a map; the last of a name wins,
	// as a map's would.
	byName := func(name string) (oip.Tensor, bool) {
		for i := len(tensors) - 1; i >= 0; i-- {
			if tensors[i].Name == name {
				return tensors[i], true
			}
		}
		return oip.Tensor{}, false
	}
	ordered := tensors
	if !declared && len(ins) == len(tensors) && namesInputs(tensors, ins) {
		// Undeclared inputs are named after forward's arguments: a request that names them
		// all is given to forward in its order, whatever the request's.
		ordered = make([]oip.Tensor, len(ins))
		for i, in := range ins {
			ordered[i], _ = byName(in.Name)
		}
	}
	if declared {
		if len(tensors) != len(ins) {
			return nil, fmt.Errorf("model takes %d inputs, request has %d", len(ins), len(tensors))
		}
		ordered = make([]oip.Tensor, len(ins))
		for i, in := range ins {
			t, ok := byName(in.Name)
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
			return nil, fmt.Errorf("input %q: datatype %s has no tensor type in torchd", t.Name, t.Datatype)
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

// bytesPayloads hands each element of a BYTES tensor of shape [N] or [N, 1] to the handler's
// Preprocess as one payload, as a multipart request's files: base64 text (what TorchServe's
// clients put in JSON) as text/plain, which the image handlers decode, else as it is.
func bytesPayloads(t oip.Tensor) (*handlers.Request, error) {
	if len(t.Shape) == 0 || len(t.Shape) > 2 || len(t.Shape) == 2 && t.Shape[1] != 1 {
		return nil, handlers.BadInput("input %q: BYTES input must have shape [N] or [N, 1], got %v", t.Name, t.Shape)
	}
	var ins []handlers.Payload
	err := bytestr.Each(t.Data, func(_ int, s []byte) error {
		p := handlers.Payload{Name: t.Name, Data: s}
		if isBase64(p.Data) {
			p.ContentType = "text/plain"
		}
		ins = append(ins, p)
		return nil
	})
	if err != nil {
		return nil, handlers.BadInput("input %q: %v", t.Name, err)
	}
	if int64(len(ins)) != t.Shape[0] {
		return nil, handlers.BadInput("input %q: shape %v but %d elements", t.Name, t.Shape, len(ins))
	}
	return &handlers.Request{Inputs: ins, Header: func(string) string { return "" }}, nil
}

// isBase64 reports whether b is all base64's alphabet (and whitespace): no image file is.
func isBase64(b []byte) bool {
	for _, c := range b {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r') {
			return false
		}
	}
	return len(b) > 0
}

// textSample hands a BYTES tensor of texts, shape [N] or [N, 1], to a handler that
// tokenizes them itself.
func textSample(ts handlers.TextSampler, t oip.Tensor) (*handlers.Sample, error) {
	if len(t.Shape) == 0 || len(t.Shape) > 2 || len(t.Shape) == 2 && t.Shape[1] != 1 {
		return nil, fmt.Errorf("input %q: BYTES texts must have shape [N] or [N, 1], got %v", t.Name, t.Shape)
	}
	var texts []string
	err := bytestr.Each(t.Data, func(i int, s []byte) error {
		if !utf8.Valid(s) {
			return fmt.Errorf("text %d is not valid UTF-8", i)
		}
		texts = append(texts, string(s))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("input %q: %v", t.Name, err)
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
func v2Response(v *core.ModelVersion, req *oip.InferRequest, out []handlers.Tensor, decl []oip.MetadataTensor) (*oip.InferResponse, []oip.Tensor, func(string) bool, error) {
	resp := &oip.InferResponse{ModelName: v.Name, ModelVersion: v.Version, ID: req.ID}
	tensors := make([]oip.Tensor, 0, len(out))
	for i, t := range out {
		var name string
		switch {
		case t.Name != "":
			name = t.Name // a dict's key
		case i < len(decl):
			name = decl[i].Name
		default:
			name = "output__" + strconv.Itoa(i)
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
	for i, o := range req.Outputs {
		k, err := classCount(o.Parameters)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("output %q: %v", o.Name, err)
		}
		if k > 0 {
			if tensors[i], err = classify(tensors[i], k, batchedOutputs(v), outputLabels(v, o.Name)); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	resp.Outputs = make([]oip.ResponseOutput, 0, len(tensors))
	for _, t := range tensors {
		resp.Outputs = append(resp.Outputs, oip.ResponseOutput{Name: t.Name, Shape: t.Shape, Datatype: t.Datatype})
	}
	return resp, tensors, req.WantsBinary, nil
}

// batchedOutputs reports whether v's outputs lead with the batch dimension: every model's
// but a Triton model's without batching (max_batch_size 0).
func batchedOutputs(v *core.ModelVersion) bool {
	t := repository.AdapterOf(v)
	return t == nil || t.Batched()
}

// outputLabels are the class labels of v's output name: a Triton model's label_filename, an
// archive's index_to_name.json; nil when it has none.
func outputLabels(v *core.ModelVersion, name string) map[int]string {
	if t := repository.AdapterOf(v); t != nil {
		return t.Labels(name)
	}
	return v.Archive().Labels
}
