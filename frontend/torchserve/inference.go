package torchserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"sort"
	"strconv"
	"strings"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/valyala/fasthttp"
)

func (a *API) ping(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	if a.Ready() {
		frontend.WriteStatus(ctx, 200, "Healthy")
		return
	}
	frontend.WriteStatus(ctx, 500, "Unhealthy")
}

// explain answers POST /explanations as TorchServe does: the handler's Integrated Gradients
// of the target class (a "target" form field or JSON key; 0 by default) for the request's
// inputs. It is a request like a prediction, in the model's queue and its metrics; a worker
// runs it alone.
func (a *API) explain(ctx *fasthttp.RequestCtx, p frontend.Params) {
	res, err := a.Registry.Serve(&core.Request{Model: p[0], Version: version(p), Call: frontend.RESTCall(ctx), Explain: true,
		Decode: func(v *core.ModelVersion) (core.Input, error) {
			req, err := requestPayloads(ctx, a.MaxRequestSize)
			if err != nil {
				return core.Input{}, payloadError(err)
			}
			if _, ok := v.Handler().(handlers.Explainer); !ok {
				// A handler that explains in its own process (a Python handler's
				// explain_handle) reads the target from its request itself.
				return core.Input{Payloads: req}, nil
			}
			target, err := explainTarget(req)
			return core.Input{Payloads: req, Target: target}, err
		}})
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	writeResponse(ctx, res.Response)
}

// explainTarget takes the class to explain out of the request, as TorchServe's explain_handle
// reads a row's "target": a multipart field, or a key of a JSON object body. It is 0 when
// absent, as there.
func explainTarget(req *handlers.Request) (int, error) {
	target := 0
	kept := req.Inputs[:0]
	for _, in := range req.Inputs {
		if in.Name == "target" {
			n, err := strconv.Atoi(strings.TrimSpace(string(in.Data)))
			if err != nil || n < 0 {
				return 0, fmt.Errorf("target must be a class index ≥ 0, got %q", in.Data)
			}
			target = n
			continue
		}
		kept = append(kept, in)
	}
	req.Inputs = kept
	if len(req.Inputs) == 1 && strings.HasPrefix(req.Inputs[0].ContentType, "application/json") {
		var body struct {
			Target *json.Number `json:"target"`
		}
		if json.Unmarshal(req.Inputs[0].Data, &body) == nil && body.Target != nil {
			n, err := strconv.Atoi(body.Target.String())
			if err != nil || n < 0 {
				return 0, fmt.Errorf("target must be a class index ≥ 0, got %s", body.Target)
			}
			target = n
		}
	}
	if len(req.Inputs) == 0 {
		return 0, errors.New("the request has no input to explain")
	}
	return target, nil
}

func (a *API) invocations(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	name := string(ctx.QueryArgs().Peek("model_name"))
	if name == "" {
		all := a.Registry.Defaults()
		if len(all) != 1 {
			frontend.WriteTorchServeError(ctx, 400, "BadRequestException", "Parameter model_name is required.")
			return
		}
		name = all[0].Name
	}
	a.predict(ctx, name, "")
}

func version(p frontend.Params) string {
	if len(p) > 1 {
		return p[1]
	}
	return ""
}

func (a *API) predictRoute(ctx *fasthttp.RequestCtx, p frontend.Params) {
	a.predict(ctx, p[0], version(p))
}

// predict serves a TorchServe prediction: the request's payloads go through the model's
// handler, and its answer is the response.
func (a *API) predict(ctx *fasthttp.RequestCtx, name, ver string) {
	c := frontend.RESTCall(ctx)
	frontend.TraceREST(a.Tracer, ctx, &c, "torchserve", "/predictions/{model_name}")
	if a.mayStream(name, ver) {
		a.predictStreamed(ctx, c, name, ver)
		return
	}
	res, err := a.Registry.Serve(&core.Request{Model: name, Version: ver, Call: c,
		Decode: func(*core.ModelVersion) (core.Input, error) {
			req, err := requestPayloads(ctx, a.MaxRequestSize)
			if err != nil {
				return core.Input{}, payloadError(err)
			}
			return core.Input{Payloads: req}, nil
		}})
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	writeResponse(ctx, res.Response)
}

// writeResponse answers with a handler's response.
func writeResponse(ctx *fasthttp.RequestCtx, resp *handlers.Response) {
	status := resp.Status
	if status == 0 {
		status = 200
	}
	ctx.SetStatusCode(status)
	if resp.ContentType != "" {
		ctx.SetContentType(resp.ContentType)
	}
	ctx.SetBody(resp.Body)
}

// payloadError is a body that requestPayloads could not read, as the core's kind.
func payloadError(err error) error {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return core.WithKind(err, core.ErrTooLarge)
	}
	return core.WithKind(err, core.ErrBadInput)
}

// requestPayloads reads the request's inputs: one per multipart field or file (several files
// are several inputs, batched together), else the raw body with its content type. A gzipped
// or deflated body may decompress to at most maxBody bytes (ErrBodyTooLarge beyond).
func requestPayloads(ctx *fasthttp.RequestCtx, maxBody int) (*handlers.Request, error) {
	req := &handlers.Request{Header: func(n string) string { return string(ctx.Request.Header.Peek(n)) }, Canceled: frontend.ClientGone(ctx.Conn()),
		Headers: func(yield func(string, string) bool) {
			for k, v := range ctx.Request.Header.All() {
				if !yield(string(k), string(v)) {
					return
				}
			}
		},
		Query: func(yield func(string, string) bool) {
			for k, v := range ctx.QueryArgs().All() {
				if !yield(string(k), string(v)) {
					return
				}
			}
		}}
	ct := string(ctx.Request.Header.ContentType())
	if strings.HasPrefix(ct, "multipart/form-data") {
		// fasthttp gunzips a multipart body whole, without a limit unless given one.
		form, err := ctx.MultipartFormWithLimit(maxBody)
		if errors.Is(err, fasthttp.ErrBodyTooLarge) {
			return nil, fmt.Errorf("multipart body decompresses to more than max_request_size (%d bytes): %w", maxBody, err)
		}
		if err != nil {
			return nil, fmt.Errorf("malformed multipart body: %v", err)
		}
		names := make([]string, 0, len(form.File)+len(form.Value))
		for n := range form.File {
			names = append(names, n)
		}
		for n := range form.Value {
			if _, dup := form.File[n]; !dup {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			for _, fh := range form.File[n] {
				b, err := readFile(fh)
				if err != nil {
					return nil, fmt.Errorf("multipart file %q: %v", fh.Filename, err)
				}
				req.Inputs = append(req.Inputs, handlers.Payload{Name: n, ContentType: fh.Header.Get("Content-Type"), Data: b})
			}
			for _, val := range form.Value[n] {
				req.Inputs = append(req.Inputs, handlers.Payload{Name: n, ContentType: "text/plain", Data: []byte(val)})
			}
		}
		if len(req.Inputs) == 0 {
			return nil, errors.New("multipart body has no fields")
		}
		return req, nil
	}
	// The body stays fasthttp's, which reuses its buffer for the next request on the
	// connection once this one is answered: a request answered while its batch may still
	// read the body (a 504) takes it from fasthttp first (call.keep).
	body := ctx.Request.Body()
	if enc := ctx.Request.Header.Peek("Content-Encoding"); len(enc) > 0 {
		// As the Open Inference Protocol's routes: gzip or deflate, inflated to at most
		// max_request_size.
		b, err := oip.Decompress(body, string(enc), maxBody)
		if errors.Is(err, oip.ErrBodyTooLarge) {
			return nil, fmt.Errorf("%s body decompresses to more than max_request_size (%d bytes): %w", enc, maxBody, fasthttp.ErrBodyTooLarge)
		}
		if err != nil {
			return nil, err
		}
		body = b
	}
	req.Inputs = []handlers.Payload{{Name: "body", ContentType: ct, Data: body}}
	return req, nil
}

func readFile(fh *multipart.FileHeader) ([]byte, error) {
	f, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, fh.Size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}
