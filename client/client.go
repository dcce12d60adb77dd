// Package client is an HTTP client for the Open Inference Protocol (KServe v2) with Triton's
// binary tensor data extension, for torchd's own tests and benchmarks. It sends what Triton's
// C++ client (and so perf_analyzer) sends, so that what passes here passes there.
// It does not retry, pool requests or know any model; one Client is safe for concurrent use.
package client

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/torchd/torchd/oip"
)

// Client talks to one server. Its zero value is not usable; call New.
type Client struct {
	base        string
	hc          *http.Client
	maxResponse int
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc instead of the default, whose transport keeps
// enough idle connections per host for a benchmark's concurrency and never asks for
// compression unless InferOptions.Compress does.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithMaxResponseBody caps a response body, after decompression; the default is
// oip.DefaultMaxBody.
func WithMaxResponseBody(n int) Option { return func(c *Client) { c.maxResponse = n } }

// defaultHTTP is shared by every Client without WithHTTPClient, so they share connections.
var defaultHTTP = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Go's transport otherwise adds "Accept-Encoding: gzip" to every request, which
	// Triton's C++ client does not send.
	t.DisableCompression = true
	// The default of 2 would close and reopen connections under any concurrency.
	t.MaxIdleConnsPerHost = 1024
	return &http.Client{Transport: t}
}()

// New returns a client for the server at baseURL, such as "http://localhost:8000".
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: defaultHTTP, maxResponse: oip.DefaultMaxBody}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is a response with an error status. Message is the body's {"error": ...} text, or
// the body itself when it is not that JSON.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// InferOptions are the per-request choices of Infer. The zero value sends JSON and asks for
// every output as JSON.
type InferOptions struct {
	// ID is the request's "id", echoed in the response.
	ID string
	// Binary sends the inputs as binary data rather than JSON; FP16 and BF16 always go binary.
	Binary bool
	// BinaryOutputs asks for the outputs as binary data: "binary_data" on each of Outputs,
	// or "binary_data_output" on the request when Outputs is empty.
	BinaryOutputs bool
	// Outputs names the outputs to return; empty means all of them.
	Outputs []string
	// Parameters are the request's parameters, such as "priority" and "timeout" (µs).
	Parameters oip.Parameters
	// Compress is the Content-Encoding of the request body, "gzip" or "deflate", also
	// offered as Accept-Encoding for the response; empty sends the body as it is.
	Compress string
}

// ServerLive reports GET /v2/health/live: true for 200, false for a 4xx or 503.
func (c *Client) ServerLive(ctx context.Context) (bool, error) {
	return c.health(ctx, "/v2/health/live")
}

// ServerReady reports GET /v2/health/ready, as ServerLive does.
func (c *Client) ServerReady(ctx context.Context) (bool, error) {
	return c.health(ctx, "/v2/health/ready")
}

// ModelReady reports GET /v2/models/{model}[/versions/{version}]/ready, as ServerLive does;
// an unknown model is not ready. version "" means the server's choice.
func (c *Client) ModelReady(ctx context.Context, model, version string) (bool, error) {
	return c.health(ctx, modelPath(model, version)+"/ready")
}

// ServerMetadata returns GET /v2.
func (c *Client) ServerMetadata(ctx context.Context) (*oip.ServerMetadata, error) {
	var m oip.ServerMetadata
	if err := c.getJSON(ctx, "/v2", &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// ModelMetadata returns GET /v2/models/{model}[/versions/{version}].
func (c *Client) ModelMetadata(ctx context.Context, model, version string) (*oip.ModelMetadata, error) {
	var m oip.ModelMetadata
	if err := c.getJSON(ctx, modelPath(model, version), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// ModelConfig returns GET /v2/models/{model}[/versions/{version}]/config, Triton's
// model_configuration extension, as decoded JSON.
func (c *Client) ModelConfig(ctx context.Context, model, version string) (map[string]any, error) {
	var m map[string]any
	if err := c.getJSON(ctx, modelPath(model, version)+"/config", &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Infer runs POST /v2/models/{model}[/versions/{version}]/infer with inputs and returns the
// response and its outputs in response order. Binary output data aliases the response body.
// Like Triton's C++ client it always sends Inference-Header-Content-Length (the whole body's
// length for pure JSON), and Content-Type application/octet-stream when binary data follows
// the JSON, application/json otherwise.
func (c *Client) Infer(ctx context.Context, model, version string, inputs []oip.Tensor, opts InferOptions) (*oip.InferResponse, []oip.Tensor, error) {
	req := &oip.InferRequest{ID: opts.ID}
	if len(opts.Parameters) > 0 || (opts.BinaryOutputs && len(opts.Outputs) == 0) {
		req.Parameters = make(oip.Parameters, len(opts.Parameters)+1)
		for k, v := range opts.Parameters {
			req.Parameters[k] = v
		}
		if opts.BinaryOutputs && len(opts.Outputs) == 0 {
			req.Parameters[oip.ParamBinaryDataOutput] = true
		}
	}
	for _, name := range opts.Outputs {
		o := oip.RequestOutput{Name: name}
		if opts.BinaryOutputs {
			o.Parameters = oip.Parameters{oip.ParamBinaryData: true}
		}
		req.Outputs = append(req.Outputs, o)
	}
	body, headerLen, err := oip.EncodeRequest(req, inputs, opts.Binary)
	if err != nil {
		return nil, nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/octet-stream")
	if headerLen < 0 {
		headerLen = len(body)
		h.Set("Content-Type", "application/json")
	}
	h.Set(oip.HeaderContentLength, strconv.Itoa(headerLen))
	if opts.Compress != "" {
		if body, err = compress(body, opts.Compress); err != nil {
			return nil, nil, err
		}
		h.Set("Content-Encoding", opts.Compress)
		h.Set("Accept-Encoding", opts.Compress)
	}
	resp, data, err := c.do(ctx, http.MethodPost, modelPath(model, version)+"/infer", body, h)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, nil, errorFrom(resp.StatusCode, data)
	}
	respHeaderLen := -1
	if v := resp.Header.Get(oip.HeaderContentLength); v != "" {
		if respHeaderLen, err = strconv.Atoi(v); err != nil || respHeaderLen < 0 {
			return nil, nil, fmt.Errorf("client: bad %s %q in response", oip.HeaderContentLength, v)
		}
	}
	return oip.DecodeResponse(data, respHeaderLen)
}

func modelPath(model, version string) string {
	p := "/v2/models/" + url.PathEscape(model)
	if version != "" {
		p += "/versions/" + url.PathEscape(version)
	}
	return p
}

func (c *Client) health(ctx context.Context, path string) (bool, error) {
	resp, data, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return false, err
	}
	switch s := resp.StatusCode; {
	case s/100 == 2:
		return true, nil
	case s/100 == 4 || s == http.StatusServiceUnavailable:
		// The spec's "false": Triton answers 400, KServe's Python server 503.
		return false, nil
	default:
		return false, errorFrom(s, data)
	}
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, data, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("client: GET %s: %w", path, err)
	}
	return nil
}

// do sends one request and reads the whole response body, decompressed.
func (c *Client) do(ctx context.Context, method, path string, body []byte, h http.Header) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	switch enc := strings.ToLower(resp.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		if r, err = gzip.NewReader(r); err != nil {
			return nil, nil, fmt.Errorf("client: %s %s: gzip response: %w", method, path, err)
		}
	case "deflate":
		if r, err = zlib.NewReader(r); err != nil {
			return nil, nil, fmt.Errorf("client: %s %s: deflate response: %w", method, path, err)
		}
	default:
		return nil, nil, fmt.Errorf("client: %s %s: unsupported response Content-Encoding %q", method, path, enc)
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(c.maxResponse)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: reading response: %w", method, path, err)
	}
	if len(data) > c.maxResponse {
		return nil, nil, fmt.Errorf("client: %s %s: response body exceeds %d bytes", method, path, c.maxResponse)
	}
	return resp, data, nil
}

func errorFrom(status int, body []byte) error {
	var e oip.ErrorResponse
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return &Error{Status: status, Message: e.Error}
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}

func compress(body []byte, encoding string) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch encoding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	default:
		return nil, errors.New("client: Compress must be \"gzip\" or \"deflate\", not " + strconv.Quote(encoding))
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
