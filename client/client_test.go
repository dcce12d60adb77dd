package client

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/oip"
)

// fake is a tiny stand-in for torchd's server, built on oip, to test the client only. Its
// one model, "echo" (also called "my model", to test path escaping), returns each
// input as the output "out_<name>". It records what the client sent.
type fake struct {
	mu       sync.Mutex
	ready    bool
	header   http.Header // of the last request
	path     string      // of the last request
	req      *oip.InferRequest
	respHL   int // the Inference-Header-Content-Length the fake last sent, -1 for none
	srv      *httptest.Server
	failWith int // when set, infer answers this status
}

func newFake(t *testing.T) *fake {
	f := &fake{}
	mux := http.NewServeMux()
	known := func(w http.ResponseWriter, r *http.Request) bool {
		if m := r.PathValue("model"); m != "echo" && m != "my model" {
			writeJSON(w, http.StatusNotFound, oip.ErrorResponse{Error: "unknown model \"" + m + "\""})
			return false
		}
		return true
	}
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.ready {
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	mux.HandleFunc("GET /v2", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, oip.ServerMetadata{Name: "fake", Version: "0.1", Extensions: []string{"binary_tensor_data", "model_configuration"}})
	})
	meta := func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if known(w, r) {
			writeJSON(w, 200, oip.ModelMetadata{Name: r.PathValue("model"), Versions: []string{"1"}, Platform: "pytorch_libtorch",
				Inputs:  []oip.MetadataTensor{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 3}}},
				Outputs: []oip.MetadataTensor{{Name: "out_x", Datatype: "FP32", Shape: []int64{-1, 3}}}})
		}
	}
	mux.HandleFunc("GET /v2/models/{model}", meta)
	mux.HandleFunc("GET /v2/models/{model}/versions/{version}", meta)
	ready := func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if known(w, r) && r.PathValue("version") == "2" {
			writeJSON(w, http.StatusBadRequest, oip.ErrorResponse{Error: "Model version not ready"})
		}
	}
	mux.HandleFunc("GET /v2/models/{model}/ready", ready)
	mux.HandleFunc("GET /v2/models/{model}/versions/{version}/ready", ready)
	config := func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if known(w, r) {
			io.WriteString(w, `{"name":"echo","max_batch_size":8,"input":[{"name":"x"}],"output":[{"name":"out_x"}],"dynamic_batching":{}}`)
		}
	}
	mux.HandleFunc("GET /v2/models/{model}/config", config)
	mux.HandleFunc("GET /v2/models/{model}/versions/{version}/config", config)
	infer := func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		if !known(w, r) {
			return
		}
		f.mu.Lock()
		fail := f.failWith
		f.mu.Unlock()
		if fail != 0 {
			if fail == http.StatusBadGateway {
				http.Error(w, "upstream went away", fail)
			} else {
				writeJSON(w, fail, oip.ErrorResponse{Error: "Exceeds maximum queue size"})
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		hl := -1
		if v := r.Header.Get(oip.HeaderContentLength); v != "" {
			hl, _ = strconv.Atoi(v)
		}
		req, ins, err := oip.DecodeRequest(body, hl, r.Header.Get("Content-Encoding"), 0)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, oip.ErrorResponse{Error: err.Error()})
			return
		}
		f.mu.Lock()
		f.req = req
		f.mu.Unlock()
		var outs []oip.Tensor
		for _, in := range ins {
			name := "out_" + in.Name
			if len(req.Outputs) > 0 && !slices.ContainsFunc(req.Outputs, func(o oip.RequestOutput) bool { return o.Name == name }) {
				continue
			}
			outs = append(outs, oip.Tensor{Name: name, Datatype: in.Datatype, Shape: in.Shape, Data: in.Data})
		}
		out, ohl, err := oip.EncodeResponse(&oip.InferResponse{ModelName: r.PathValue("model"), ModelVersion: "1", ID: req.ID}, outs, req.WantsBinary)
		if err != nil {
			writeJSON(w, 500, oip.ErrorResponse{Error: err.Error()})
			return
		}
		f.mu.Lock()
		f.respHL = ohl
		f.mu.Unlock()
		if ohl >= 0 {
			w.Header().Set(oip.HeaderContentLength, strconv.Itoa(ohl))
			w.Header().Set("Content-Type", "application/octet-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		switch r.Header.Get("Accept-Encoding") {
		case "gzip":
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(out)
			zw.Close()
			out = buf.Bytes()
			w.Header().Set("Content-Encoding", "gzip")
		case "deflate":
			var buf bytes.Buffer
			zw := zlib.NewWriter(&buf)
			zw.Write(out)
			zw.Close()
			out = buf.Bytes()
			w.Header().Set("Content-Encoding", "deflate")
		}
		w.Write(out)
	}
	mux.HandleFunc("POST /v2/models/{model}/infer", infer)
	mux.HandleFunc("POST /v2/models/{model}/versions/{version}/infer", infer)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) record(r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.header = r.Header.Clone()
	f.path = r.URL.EscapedPath()
}

func (f *fake) last() (http.Header, string, *oip.InferRequest, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.header, f.path, f.req, f.respHL
}

func (f *fake) fail(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWith = status
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func TestHealth(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL + "/")
	ctx := context.Background()
	if ok, err := c.ServerLive(ctx); !ok || err != nil {
		t.Errorf("ServerLive = %v, %v", ok, err)
	}
	if ok, err := c.ServerReady(ctx); ok || err != nil {
		t.Errorf("ServerReady before ready = %v, %v; want false, nil", ok, err)
	}
	f.mu.Lock()
	f.ready = true
	f.mu.Unlock()
	if ok, err := c.ServerReady(ctx); !ok || err != nil {
		t.Errorf("ServerReady = %v, %v", ok, err)
	}
	for _, tc := range []struct {
		model, version string
		want           bool
		path           string
	}{
		{"echo", "", true, "/v2/models/echo/ready"},
		{"echo", "1", true, "/v2/models/echo/versions/1/ready"},
		{"echo", "2", false, "/v2/models/echo/versions/2/ready"},
		{"nope", "", false, "/v2/models/nope/ready"},
	} {
		ok, err := c.ModelReady(ctx, tc.model, tc.version)
		if ok != tc.want || err != nil {
			t.Errorf("ModelReady(%q, %q) = %v, %v; want %v", tc.model, tc.version, ok, err, tc.want)
		}
		if _, path, _, _ := f.last(); path != tc.path {
			t.Errorf("ModelReady(%q, %q) asked %s, want %s", tc.model, tc.version, path, tc.path)
		}
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, err := New(srv.URL).ServerLive(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Status != 500 || e.Message != "boom" {
		t.Errorf("ServerLive on a 500 = %v; want *Error{500, boom}", err)
	}
	srv.Close()
	if _, err := New(srv.URL).ServerLive(ctx); err == nil {
		t.Error("ServerLive against a closed server succeeded")
	}
}

func TestMetadataAndConfig(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL)
	ctx := context.Background()
	sm, err := c.ServerMetadata(ctx)
	if err != nil || sm.Name != "fake" || !slices.Contains(sm.Extensions, "binary_tensor_data") {
		t.Errorf("ServerMetadata = %+v, %v", sm, err)
	}
	mm, err := c.ModelMetadata(ctx, "my model", "1")
	if err != nil || mm.Name != "my model" || mm.Platform != "pytorch_libtorch" || len(mm.Inputs) != 1 || !slices.Equal(mm.Inputs[0].Shape, []int64{-1, 3}) {
		t.Errorf("ModelMetadata = %+v, %v", mm, err)
	}
	if _, path, _, _ := f.last(); path != "/v2/models/my%20model/versions/1" {
		t.Errorf("ModelMetadata asked %s", path)
	}
	cfg, err := c.ModelConfig(ctx, "echo", "")
	if err != nil || cfg["max_batch_size"] != 8.0 || cfg["dynamic_batching"] == nil {
		t.Errorf("ModelConfig = %v, %v", cfg, err)
	}
	_, err = c.ModelMetadata(ctx, "nope", "")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Message != `unknown model "nope"` {
		t.Errorf("ModelMetadata(nope) = %v; want *Error{404, unknown model \"nope\"}", err)
	}
	if _, err := c.ModelConfig(ctx, "nope", "3"); !errors.As(err, &e) || e.Status != 404 {
		t.Errorf("ModelConfig(nope) = %v", err)
	}
}

func fp32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

var inputs = []oip.Tensor{
	{Name: "x", Datatype: "FP32", Shape: []int64{1, 3}, Data: fp32(1, 2.5, -3)},
	{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: []byte{2, 0, 0, 0, 'a', 'b', 1, 0, 0, 0, 'c'}},
	{Name: "h", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0x00, 0x3c}},
}

func renamed(ts []oip.Tensor) []oip.Tensor {
	var out []oip.Tensor
	for _, t := range ts {
		t.Name = "out_" + t.Name
		out = append(out, t)
	}
	return out
}

func assertTensors(t *testing.T, got, want []oip.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Datatype != w.Datatype || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestInferJSON(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL)
	resp, outs, err := c.Infer(context.Background(), "echo", "", inputs[:2], InferOptions{ID: "42", Parameters: oip.Parameters{"priority": 1, "timeout": 5000}})
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, outs, renamed(inputs[:2]))
	if resp.ModelName != "echo" || resp.ID != "42" {
		t.Errorf("response = %+v", resp)
	}
	h, path, req, respHL := f.last()
	if path != "/v2/models/echo/infer" {
		t.Errorf("path = %s", path)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	// Sent always, as Triton's C++ client does; for pure JSON it is the whole body.
	if v := h.Get(oip.HeaderContentLength); v == "" || v != h.Get("Content-Length") {
		t.Errorf("%s = %q, Content-Length %q; want equal", oip.HeaderContentLength, v, h.Get("Content-Length"))
	}
	if h.Get("Content-Encoding") != "" || h.Get("Accept-Encoding") != "" {
		t.Errorf("compression headers sent without Compress: %v", h)
	}
	if req.Parameters["priority"] != 1.0 || req.Parameters["timeout"] != 5000.0 || req.ID != "42" {
		t.Errorf("server saw %+v", req)
	}
	for _, in := range req.Inputs {
		if _, ok := in.Parameters[oip.ParamBinaryDataSize]; ok {
			t.Errorf("input %s went binary", in.Name)
		}
	}
	if respHL != -1 {
		t.Errorf("response went binary (header %d) though JSON was asked for", respHL)
	}
}

func TestInferBinary(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL)
	_, outs, err := c.Infer(context.Background(), "echo", "1", inputs, InferOptions{Binary: true, BinaryOutputs: true, Outputs: []string{"out_x", "out_h"}})
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, outs, []oip.Tensor{renamed(inputs)[0], renamed(inputs)[2]})
	h, path, req, respHL := f.last()
	if path != "/v2/models/echo/versions/1/infer" {
		t.Errorf("path = %s", path)
	}
	if ct := h.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	hl, _ := strconv.Atoi(h.Get(oip.HeaderContentLength))
	cl, _ := strconv.Atoi(h.Get("Content-Length"))
	if hl <= 0 || cl != hl+12+11+2 {
		t.Errorf("%s = %d, Content-Length = %d; want the JSON's length and JSON + 25 bytes", oip.HeaderContentLength, hl, cl)
	}
	if len(req.Outputs) != 2 || !req.WantsBinary("out_x") || !req.WantsBinary("out_h") {
		t.Errorf("requested outputs = %+v; want both with binary_data", req.Outputs)
	}
	for _, in := range req.Inputs {
		if _, ok := in.Parameters[oip.ParamBinaryDataSize]; !ok {
			t.Errorf("input %s went as JSON", in.Name)
		}
	}
	if respHL < 0 {
		t.Error("response came back JSON")
	}

	// BinaryOutputs with no Outputs asks for all outputs binary at the request level.
	if _, outs, err = c.Infer(context.Background(), "echo", "", inputs, InferOptions{BinaryOutputs: true}); err != nil {
		t.Fatal(err)
	}
	assertTensors(t, outs, renamed(inputs))
	if _, _, req, respHL = f.last(); req.Parameters[oip.ParamBinaryDataOutput] != true || respHL < 0 {
		t.Errorf("server saw parameters %v, answered header %d; want binary_data_output and a binary answer", req.Parameters, respHL)
	}
}

func TestInferCompressed(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL)
	for _, enc := range []string{"gzip", "deflate"} {
		for _, bin := range []bool{false, true} {
			_, outs, err := c.Infer(context.Background(), "echo", "", inputs, InferOptions{Binary: bin, BinaryOutputs: bin, Compress: enc})
			if err != nil {
				t.Fatalf("%s binary=%v: %v", enc, bin, err)
			}
			assertTensors(t, outs, renamed(inputs))
			h, _, _, _ := f.last()
			if h.Get("Content-Encoding") != enc || h.Get("Accept-Encoding") != enc {
				t.Errorf("%s: Content-Encoding %q, Accept-Encoding %q", enc, h.Get("Content-Encoding"), h.Get("Accept-Encoding"))
			}
		}
	}
	if _, _, err := c.Infer(context.Background(), "echo", "", inputs, InferOptions{Compress: "br"}); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("Compress br: %v", err)
	}
}

func TestInferErrors(t *testing.T) {
	f := newFake(t)
	c := New(f.srv.URL)
	ctx := context.Background()
	var e *Error

	_, _, err := c.Infer(ctx, "nope", "", inputs, InferOptions{})
	if !errors.As(err, &e) || e.Status != 404 || e.Message != `unknown model "nope"` {
		t.Errorf("unknown model: %v", err)
	}
	if err.Error() != `HTTP 404: unknown model "nope"` {
		t.Errorf("Error() = %q", err)
	}

	f.fail(http.StatusServiceUnavailable)
	_, _, err = c.Infer(ctx, "echo", "", inputs, InferOptions{})
	if !errors.As(err, &e) || e.Status != 503 || e.Message != "Exceeds maximum queue size" {
		t.Errorf("503: %v", err)
	}
	f.fail(http.StatusBadGateway) // a plain-text body, as a proxy might send
	_, _, err = c.Infer(ctx, "echo", "", inputs, InferOptions{})
	if !errors.As(err, &e) || e.Status != 502 || e.Message != "upstream went away" {
		t.Errorf("502: %v", err)
	}
	f.fail(0)

	// The fake's decoder refuses what the client's encoder cannot make, such as duplicates.
	_, _, err = c.Infer(ctx, "echo", "", []oip.Tensor{inputs[0], inputs[0]}, InferOptions{})
	if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, `duplicate input name "x"`) {
		t.Errorf("duplicate inputs: %v", err)
	}

	// An inconsistent tensor fails before anything is sent.
	_, _, err = c.Infer(ctx, "echo", "", []oip.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{2}, Data: fp32(1)}}, InferOptions{})
	if err == nil || errors.As(err, &e) {
		t.Errorf("inconsistent tensor: %v; want a local error", err)
	}

	_, _, err = New(f.srv.URL, WithMaxResponseBody(16)).Infer(ctx, "echo", "", inputs, InferOptions{})
	if err == nil || !strings.Contains(err.Error(), "exceeds 16 bytes") {
		t.Errorf("response over the limit: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.Infer(cctx, "echo", "", inputs, InferOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// A hand-written Triton-style response with a bad binary size is reported, not trusted.
func TestInferBadResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := `{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]}`
		w.Header().Set("inference-header-content-length", strconv.Itoa(len(header)))
		io.WriteString(w, header+"1234")
	}))
	defer srv.Close()
	_, _, err := New(srv.URL).Infer(context.Background(), "m", "", inputs[:1], InferOptions{})
	if !errors.Is(err, oip.ErrBadResponse) || !strings.Contains(err.Error(), "only 4 bytes") {
		t.Errorf("bad response: %v", err)
	}
}

// The default transport must not add Accept-Encoding on its own: Triton's C++ client does not.
func TestNoImplicitAcceptEncoding(t *testing.T) {
	f := newFake(t)
	if _, err := New(f.srv.URL).ModelMetadata(context.Background(), "echo", ""); err != nil {
		t.Fatal(err)
	}
	if h, _, _, _ := f.last(); h.Get("Accept-Encoding") != "" {
		t.Errorf("Accept-Encoding = %q", h.Get("Accept-Encoding"))
	}
}
