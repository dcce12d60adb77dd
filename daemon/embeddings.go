package daemon

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/tracing"
	"github.com/valyala/fasthttp"
)

// The OpenAI-compatible embeddings API (POST /v1/embeddings), as TEI, Infinity and vLLM
// serve it: a codec over the inference path /predictions takes. The request's input goes
// to the model's handler as a JSON payload; its embeddings come back in OpenAI's shape.

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

func (d *Daemon) embeddings(ctx *fasthttp.RequestCtx, _ params) {
	arrived := time.Now()
	c := restCall(ctx)
	d.traceREST(ctx, &c, "openai", "/v1/embeddings")
	var req embeddingsRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
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
	v, err := d.Registry.Get(model, "")
	if err != nil {
		openAIError(ctx, 404, "model", "model_not_found", fmt.Sprintf("The model '%s' does not exist.", model))
		return
	}
	emb, ok := v.Handler().(embedder)
	if !ok {
		openAIError(ctx, 400, "model", "", fmt.Sprintf("The model '%s' is not an embedding model (its handler is %s).", model, v.HandlerName))
		return
	}
	if len(req.Dimensions) > 0 && !bytes.Equal(req.Dimensions, []byte("null")) {
		// Only a model trained for it (Matryoshka) keeps its quality when cut short, and
		// text_embedding's are not known to be: any other size is refused, as vLLM does.
		var n int
		if err := json.Unmarshal(req.Dimensions, &n); err != nil || n != emb.Dim() {
			openAIError(ctx, 400, "dimensions", "", fmt.Sprintf("'dimensions' must be %d, the size of %s's embeddings, which are not trained to be cut shorter; got %s", emb.Dim(), model, req.Dimensions))
			return
		}
	}
	if r, ok := c.Trace.(*tracing.Request); ok {
		r.Model(v.Name, v.Version)
	}
	v.Enter()
	code := d.embedVersion(ctx, c, v, emb, req.Input, base64Format, arrived)
	v.Answered(code.status, time.Since(arrived), code.res)
}

func (d *Daemon) embedVersion(ctx *fasthttp.RequestCtx, c core.Call, v *ModelVersion, emb embedder, input []byte, base64Format bool, arrived time.Time) outcome {
	sample, res, fail := infer(c, v, arrived, func() (*handlers.Sample, error) {
		return v.Preprocess(&handlers.Request{
			Inputs: []handlers.Payload{{Name: "input", ContentType: "application/json", Data: input}},
			Header: func(n string) string { return string(ctx.Request.Header.Peek(n)) },
		})
	})
	if fail != nil {
		param := ""
		if fail.Type == "BadRequestException" {
			param = "input"
		}
		openAIError(ctx, fail.Status, param, "", fail.Msg)
		return outcome{fail.Status, res}
	}
	dim := emb.Dim()
	if len(res.Out) != 1 || len(res.Out[0].Data) != 4*dim*sample.Items {
		openAIError(ctx, 500, "", "", fmt.Sprintf("model %s did not answer %d embeddings of %d floats", v.Name, sample.Items, dim))
		return outcome{500, res}
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
	return outcome{200, res}
}
