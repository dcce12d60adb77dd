package daemon

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/valyala/fasthttp"
)

func (d *Daemon) inferenceRouter() *router {
	return withDescription("inference", append([]*route{
		{method: "GET", pattern: "/ping", summary: "Health: 200 once every start-up model is warm, else 500", handle: d.ping},
		{method: "POST", pattern: "/predictions/{model_name}", summary: "Predict with the default version", handle: d.predictRoute},
		{method: "POST", pattern: "/predictions/{model_name}/{model_version}", summary: "Predict with a version", handle: d.predictRoute},
		{method: "PUT", pattern: "/predictions/{model_name}", summary: "Predict with the default version", handle: d.predictRoute},
		{method: "PUT", pattern: "/predictions/{model_name}/{model_version}", summary: "Predict with a version", handle: d.predictRoute},
		{method: "POST", pattern: "/explanations/{model_name}", summary: "Integrated Gradients of the target class (image and text classifiers; 501 for other handlers)", handle: d.explain},
		{method: "POST", pattern: "/explanations/{model_name}/{model_version}", summary: "Integrated Gradients of a version", handle: d.explain},
		{method: "POST", pattern: "/invocations", summary: "SageMaker-style predict; ?model_name= or the only model", handle: d.invocations},
		{method: "POST", pattern: "/models/{model_name}/invoke", summary: "SageMaker-style predict", handle: d.predictRoute},
		{method: "POST", pattern: "/v1/embeddings", summary: "OpenAI-compatible embeddings of a text_embedding model", handle: d.embeddings},
	}, append(d.kserveRoutes(), d.uiRoutes()...)...))
}

func (d *Daemon) ping(ctx *fasthttp.RequestCtx, _ params) {
	if d.startupDone() && d.Registry.Healthy() {
		writeStatus(ctx, 200, "Healthy")
		return
	}
	writeStatus(ctx, 500, "Unhealthy")
}

// explain answers POST /explanations as TorchServe does: the handler's Integrated Gradients
// of the target class (a "target" form field or JSON key; 0 by default) for the request's
// inputs. It is a request like a prediction, in the model's queue and its metrics; a worker
// runs it alone.
func (d *Daemon) explain(ctx *fasthttp.RequestCtx, p params) {
	res, err := d.Registry.Serve(&core.Request{Model: p[0], Version: version(p), Call: restCall(ctx), Explain: true,
		Decode: func(*ModelVersion) (core.Input, error) {
			req, err := requestPayloads(ctx, d.cfg.MaxRequestSize)
			if err != nil {
				return core.Input{}, payloadError(err)
			}
			target, err := explainTarget(req)
			return core.Input{Payloads: req, Target: target}, err
		}})
	if err != nil {
		writeAPIError(ctx, err)
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

func (d *Daemon) invocations(ctx *fasthttp.RequestCtx, _ params) {
	name := string(ctx.QueryArgs().Peek("model_name"))
	if name == "" {
		all := d.Registry.Defaults()
		if len(all) != 1 {
			writeError(ctx, 400, "BadRequestException", "Parameter model_name is required.")
			return
		}
		name = all[0].Name
	}
	d.predict(ctx, name, "")
}

func version(p params) string {
	if len(p) > 1 {
		return p[1]
	}
	return ""
}

func (d *Daemon) predictRoute(ctx *fasthttp.RequestCtx, p params) {
	d.predict(ctx, p[0], version(p))
}

// predict serves a TorchServe prediction: the request's payloads go through the model's
// handler, and its answer is the response.
func (d *Daemon) predict(ctx *fasthttp.RequestCtx, name, ver string) {
	c := restCall(ctx)
	d.traceREST(ctx, &c, "torchserve", "/predictions/{model_name}")
	if d.mayStream(name, ver) {
		d.predictStreamed(ctx, c, name, ver)
		return
	}
	res, err := d.Registry.Serve(&core.Request{Model: name, Version: ver, Call: c,
		Decode: func(*ModelVersion) (core.Input, error) {
			req, err := requestPayloads(ctx, d.cfg.MaxRequestSize)
			if err != nil {
				return core.Input{}, payloadError(err)
			}
			return core.Input{Payloads: req}, nil
		}})
	if err != nil {
		writeAPIError(ctx, err)
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

// restCall is a fasthttp request's call: its connection, and its X-Request-Timeout header.
func restCall(ctx *fasthttp.RequestCtx) core.Call {
	return core.Call{Gone: clientGone(ctx.Conn()), Timeout: func() (time.Duration, error) {
		h := ctx.Request.Header.Peek(HeaderRequestTimeout)
		if len(h) == 0 {
			return 0, nil
		}
		return parseRequestTimeout(string(h))
	}, Keep: func() { ctx.Request.SwapBody(nil) }}
}

// HeaderRequestTimeout carries a request's own deadline, counted from its arrival: a number
// of milliseconds ("250") or a Go duration ("1.5s"). A request whose deadline passes while it
// is queued is answered 504 and never reaches the model.
const HeaderRequestTimeout = "X-Request-Timeout"

func parseRequestTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("header %s must be a positive number of milliseconds or a duration like 1.5s, got %q", HeaderRequestTimeout, v)
}

// requestPayloads reads the request's inputs: one per multipart field or file (several files
// are several inputs, batched together), else the raw body with its content type. A gzipped
// or deflated body may decompress to at most maxBody bytes (ErrBodyTooLarge beyond).
func requestPayloads(ctx *fasthttp.RequestCtx, maxBody int) (*handlers.Request, error) {
	req := &handlers.Request{Header: func(n string) string { return string(ctx.Request.Header.Peek(n)) }, Canceled: clientGone(ctx.Conn()),
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

// clientGone returns a check for a disconnected client: a non-blocking peek at the socket
// that reads end-of-file or a reset. fasthttp has read the whole request by then, so any
// byte waiting is a pipelined request, and the client is still there. It is checked between
// a request's images, when the request joins a batch (so that requests whose client left
// never reach the model), and before the answer is counted. What runs in between, one
// image's decode or one batched forward, is not interrupted.
func clientGone(c net.Conn) func() bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // a closed TCP connection reads end-of-file under TLS too
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func() bool {
		gone := false
		var buf [1]byte
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == nil:
				gone = n == 0
			case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			default:
				// ECONNRESET: a client that gave up with unread data in flight resets the
				// connection instead of closing it.
				gone = true
			}
			return true
		})
		return gone
	}
}
