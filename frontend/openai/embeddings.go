// Package openai is the OpenAI-compatible embeddings API (POST /v1/embeddings), as TEI,
// Infinity and vLLM serve it: a codec over the one core call (core.Registry.Serve). The
// request's input goes to the model's handler as a JSON payload; its embeddings come back in
// OpenAI's shape, and errors in OpenAI's error shape (Statuses).
package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/tracing"
	"github.com/valyala/fasthttp"
)

// API serves /v1/embeddings over the registry.
type API struct {
	Registry *core.Registry
	Tracer   *tracing.Tracer // nil: tracing off
}

// Routes are the API's routes on the inference port.
func (a *API) Routes() []*frontend.Route {
	return frontend.WithUnauthorized([]*frontend.Route{
		{Method: "POST", Pattern: "/v1/embeddings", Summary: "OpenAI-compatible embeddings of a text_embedding model", Handle: a.embeddings},
	}, unauthorized)
}

// embedder is a handler whose model answers one embedding per input (text_embedding).
type embedder interface {
	Dim() int
	Tokens(s *handlers.Sample) int
}

// embeddingsRequest is OpenAI's CreateEmbeddingRequest; user is accepted and ignored.
type embeddingsRequest struct {
	Model          json.RawMessage `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat json.RawMessage `json:"encoding_format"`
	Dimensions     json.RawMessage `json:"dimensions"`
}

// unauthorized answers a refused key as OpenAI does: 401 invalid_api_key, which its
// clients read as a bad key.
func unauthorized(ctx *fasthttp.RequestCtx, msg string) {
	openAIError(ctx, 401, "", "invalid_api_key", msg)
}

// openAIError answers {"error": {"message", "type", "param", "code"}}, OpenAI's error shape.
func openAIError(ctx *fasthttp.RequestCtx, status int, param, code, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	if status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b, _ := json.Marshal(map[string]body{"error": {Message: msg, Type: typ, Param: nullable(param), Code: nullable(code)}})
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// paramError is a request's error in one of its parameters, which OpenAI's error names.
type paramError struct{ param, msg string }

func (e *paramError) Error() string { return e.msg }

// Statuses is the OpenAI API's table: the core's kinds as HTTP statuses; a 500 is a
// server_error. The kinds of registration and loading (a conflict, a bad model, a failed
// load) never end an embeddings request; they are the server's should one.
var Statuses = frontend.KindTable[int]{
	{Kind: core.ErrModelNotFound, Answer: 404},
	{Kind: core.ErrVersionNotFound, Answer: 404},
	{Kind: core.ErrLoading, Answer: 503},
	{Kind: core.ErrConflict, Answer: 500},
	{Kind: core.ErrDefaultVersion, Answer: 500},
	{Kind: core.ErrBadModel, Answer: 500},
	{Kind: core.ErrLoadFailed, Answer: 500},
	{Kind: core.ErrStartupTimeout, Answer: 500},
	{Kind: core.ErrBadInput, Answer: 400},
	{Kind: core.ErrTooLarge, Answer: 413},
	{Kind: core.ErrUnsupported, Answer: 400},
	{Kind: core.ErrQueueFull, Answer: 503},
	{Kind: core.ErrNoWorker, Answer: 503},
	{Kind: core.ErrUnregistered, Answer: 503},
	{Kind: core.ErrDeadline, Answer: 504},
	{Kind: core.ErrClientGone, Answer: frontend.StatusClientClosed},
	{Kind: core.ErrInference, Answer: 500},
	{Kind: core.ErrControlOff, Answer: 503},
}

// openAIAnswer answers err in OpenAI's shape: its status by kind (or the code a handler gave
// its own error), the parameter it names.
func openAIAnswer(ctx *fasthttp.RequestCtx, model string, err error) {
	status, ok := Statuses.Of(err)
	if !ok {
		status = 500
	}
	var ce *core.Error
	handlerCode := errors.As(err, &ce) && ce.HandlerCode != 0
	if handlerCode {
		status = ce.HandlerCode
	}
	var pe *paramError
	switch {
	case errors.As(err, &pe):
		openAIError(ctx, 400, pe.param, "", pe.msg)
	case errors.Is(err, core.ErrModelNotFound), errors.Is(err, core.ErrVersionNotFound):
		openAIError(ctx, 404, "model", "model_not_found", fmt.Sprintf("The model '%s' does not exist.", model))
	case errors.Is(err, core.ErrBadInput) && !handlerCode:
		// The handler refused the input; a handler's own code names no parameter.
		openAIError(ctx, status, "input", "", err.Error())
	default:
		openAIError(ctx, status, "", "", err.Error())
	}
}

func (a *API) embeddings(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	c := frontend.RESTCall(ctx)
	frontend.TraceREST(a.Tracer, ctx, &c, "openai", "/v1/embeddings")
	var req embeddingsRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
		// A body of another JSON kind is named by its kind, not by the Go type it missed.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			openAIError(ctx, 400, "", "", fmt.Sprintf("the body must be a JSON object, got %s", te.Value))
			return
		}
		openAIError(ctx, 400, "", "", fmt.Sprintf("the body must be a JSON object: %v", err))
		return
	}
	var model string
	if err := json.Unmarshal(req.Model, &model); err != nil || model == "" {
		openAIError(ctx, 400, "model", "", "'model' is required: the name of a text_embedding model")
		return
	}
	if len(req.Input) == 0 || bytes.Equal(req.Input, []byte("null")) {
		openAIError(ctx, 400, "input", "", "'input' is required: a string, an array of strings, or arrays of token ids")
		return
	}
	base64Format := false
	if len(req.EncodingFormat) > 0 && !bytes.Equal(req.EncodingFormat, []byte("null")) {
		var f string
		if err := json.Unmarshal(req.EncodingFormat, &f); err != nil || f != "float" && f != "base64" {
			openAIError(ctx, 400, "encoding_format", "", fmt.Sprintf("'encoding_format' must be \"float\" or \"base64\", got %s", req.EncodingFormat))
			return
		}
		base64Format = f == "base64"
	}
	_, err := a.Registry.Serve(&core.Request{Model: model, Call: c, Raw: true,
		Check: func(v *core.ModelVersion) error { return checkEmbedder(v, req.Dimensions) },
		Decode: func(*core.ModelVersion) (core.Input, error) {
			return core.Input{Payloads: &handlers.Request{
				Inputs:   []handlers.Payload{{Name: "input", ContentType: "application/json", Data: req.Input}},
				Header:   func(n string) string { return string(ctx.Request.Header.Peek(n)) },
				Canceled: c.Gone,
			}}, nil
		},
		Encode: func(res *core.Result) error { return encodeEmbeddings(ctx, res, base64Format) }})
	if err != nil {
		openAIAnswer(ctx, model, err)
	}
}

// checkEmbedder refuses a model that is not an embedding model, and dimensions other than
// its embeddings' size.
func checkEmbedder(v *core.ModelVersion, dimensions json.RawMessage) error {
	emb, ok := v.Handler().(embedder)
	if !ok {
		return &paramError{"model", fmt.Sprintf("The model '%s' is not an embedding model (its handler is %s).", v.Name, v.HandlerName)}
	}
	if len(dimensions) > 0 && !bytes.Equal(dimensions, []byte("null")) {
		// Only a model trained for it (Matryoshka) keeps its quality when cut short, and
		// text_embedding's are not known to be: any other size is refused, as vLLM does.
		var n int
		if err := json.Unmarshal(dimensions, &n); err != nil || n != emb.Dim() {
			return &paramError{"dimensions", fmt.Sprintf("'dimensions' must be %d, the size of %s's embeddings, which are not trained to be cut shorter; got %s", emb.Dim(), v.Name, dimensions)}
		}
	}
	return nil
}

// encodeEmbeddings answers the model's embeddings in OpenAI's shape, within the core call.
func encodeEmbeddings(ctx *fasthttp.RequestCtx, res *core.Result, base64Format bool) error {
	v, sample := res.Version, res.Sample
	emb := v.Handler().(embedder)
	dim := emb.Dim()
	if len(res.Out) != 1 || len(res.Out[0].Data) != 4*dim*sample.Items {
		return fmt.Errorf("model %s did not answer %d embeddings of %d floats", v.Name, sample.Items, dim)
	}
	data := res.Out[0].Data
	b := make([]byte, 0, 64+sample.Items*(dim*12+48))
	b = append(b, `{"object":"list","data":[`...)
	for i := range sample.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		row := data[4*i*dim : 4*(i+1)*dim]
		if base64Format {
			// OpenAI's base64 is the little-endian float32s, which the row already is.
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, row)
			b = append(b, '"')
		} else {
			b = handlers.AppendFloats(b, row)
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	name, _ := json.Marshal(v.Name)
	b = append(b, name...)
	tokens := strconv.Itoa(emb.Tokens(sample))
	b = append(b, `,"usage":{"prompt_tokens":`+tokens+`,"total_tokens":`+tokens+`}}`...)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
}
