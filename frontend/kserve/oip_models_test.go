package kserve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/client"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/oip"
)

// The calls perf_analyzer makes before it sends load (server metadata, model metadata, model
// config), then inference with binary inputs and outputs, replayed with torchd's own client
// over HTTP; outputs match Python's reference within 1e-5 in every encoding.
func TestOpenInferenceProtocolDigits(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.register("url=digits_tensor.mar&batch_size=8&max_batch_delay=2&initial_workers=1&synchronous=true")
	base := s.listen()
	ctx := context.Background()
	c := client.New(base)

	if live, err := c.ServerLive(ctx); err != nil || !live {
		t.Fatalf("live: %v %v", live, err)
	}
	if ready, err := c.ServerReady(ctx); err != nil || !ready {
		t.Fatalf("ready: %v %v", ready, err)
	}
	sm, err := c.ServerMetadata(ctx)
	if err != nil || sm.Name != "torchd" || !strings.Contains(strings.Join(sm.Extensions, ","), "binary_tensor_data") {
		t.Fatalf("server metadata: %+v %v", sm, err)
	}
	md, err := c.ModelMetadata(ctx, "digits_tensor", "")
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != "pytorch_libtorch" || len(md.Inputs) != 1 || md.Inputs[0].Name != "input__0" || md.Inputs[0].Datatype != "FP32" ||
		len(md.Inputs[0].Shape) != 4 || md.Outputs[0].Name != "output__0" {
		t.Fatalf("model metadata: %+v", md)
	}
	cfg, err := c.ModelConfig(ctx, "digits_tensor", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["max_batch_size"] != float64(8) {
		t.Fatalf("config max_batch_size: %v", cfg["max_batch_size"])
	}
	in := cfg["input"].([]any)[0].(map[string]any)
	if in["data_type"] != "TYPE_FP32" || len(in["dims"].([]any)) != 3 {
		t.Fatalf("config input: %v", in)
	}
	if ready, err := c.ModelReady(ctx, "digits_tensor", ""); err != nil || !ready {
		t.Fatalf("model ready: %v %v", ready, err)
	}
	if ready, _ := c.ModelReady(ctx, "nope", ""); ready {
		t.Fatal("unknown model reported ready")
	}

	x := readZooNpy(t, "digits", "ref_input.npy")
	want := f32s(readZooNpy(t, "digits", "ref_output.npy").Data)
	input := oip.Tensor{Name: "input__0", Datatype: "FP32", Shape: x.Shape, Data: x.Data}
	for _, opts := range []client.InferOptions{
		{},
		{Binary: true},
		{Binary: true, BinaryOutputs: true},
		{BinaryOutputs: true, Compress: "gzip"},
		{Binary: true, Compress: "deflate", Outputs: []string{"output__0"}},
	} {
		resp, outs, err := c.Infer(ctx, "digits_tensor", "", []oip.Tensor{input}, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		if resp.ModelName != "digits_tensor" || len(outs) != 1 || outs[0].Datatype != "FP32" || outs[0].Shape[0] != 4 || outs[0].Shape[1] != 10 {
			t.Fatalf("%+v: response %+v outputs %+v", opts, resp, outs)
		}
		closeTo(t, "infer output", f32s(outs[0].Data), want, tolerance.Kernels)
	}

	// A raw binary request: Inference-Header-Content-Length 0, one item's data, binary out.
	one := x.Data[:28*28*4]
	req, _ := http.NewRequest("POST", base+"/v2/models/digits_tensor/infer", bytes.NewReader(one))
	req.Header.Set(oip.HeaderContentLength, "0")
	req.Header.Set("Content-Type", "application/octet-stream")
	raw, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(raw.Body)
	raw.Body.Close()
	hl, err := strconv.Atoi(raw.Header.Get(oip.HeaderContentLength))
	if raw.StatusCode != 200 || err != nil {
		t.Fatalf("raw request: %d %s", raw.StatusCode, body.Bytes())
	}
	_, outs, err := oip.DecodeResponse(body.Bytes(), hl)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "raw output", f32s(outs[0].Data), want[:10], tolerance.Kernels)

	// Errors: {"error": ...} with Triton's status codes.
	v2err := func(status int, path, body, part string) {
		t.Helper()
		r := s.do("POST", path, []byte(body))
		var e oip.ErrorResponse
		if r.status != status || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, part) {
			t.Fatalf("%s %s: %d %s, want %d with %q", path, body, r.status, r.body, status, part)
		}
	}
	v2err(404, "/v2/models/nope/infer", `{"inputs": []}`, "nope")
	v2err(400, "/v2/models/digits_tensor/infer", `{"inputs": [{"name": "input__0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, "shape")
	v2err(400, "/v2/models/digits_tensor/infer", `{"inputs": [{"name": "input__0", "shape": [1, 1, 28, 28], "datatype": "INT32", "data": [`+strings.Repeat("1,", 783)+`1]}]}`, "FP32")
	v2err(400, "/v2/models/digits_tensor/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`, "input__0")
	v2err(400, "/v2/models/digits_tensor/infer", `{"inputs": [`, "")
	v2err(400, "/v2/models/digits_tensor/infer", `{"parameters": {"priority": 2}, "inputs": [{"name": "input__0", "shape": [1], "datatype": "FP32", "data": [1]}]}`, "priority")
	v2err(400, "/v2/models/digits_tensor/infer", `{"inputs": [{"name": "input__0", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [1]}], "outputs": [{"name": "nope"}]}`, "")

	var cerr *client.Error
	if _, _, err := c.Infer(ctx, "nope", "", []oip.Tensor{input}, client.InferOptions{}); !errors.As(err, &cerr) || cerr.Status != 404 {
		t.Fatalf("client error for an unknown model: %v", err)
	}
}

// lockedBuffer is a log that the serving goroutines write while the test reads it.
type lockedBuffer = coretest.LogBuffer

// The digits CNN loaded through torch.jit.optimize_for_inference (the server-wide setting):
// the load logs it, and batched answers still match Python's reference.
func TestOptimizeForInferenceDigits(t *testing.T) {
	var log lockedBuffer
	s := newServer(t, serverOptions{log: &log, settings: archive.Settings{Optimize: archive.Of(true)}})
	s.register("url=digits_tensor.mar&batch_size=8&max_batch_delay=2&initial_workers=1&synchronous=true")
	// A synchronous registration is answered once the load, and its log line, are done.
	if !strings.Contains(log.String(), "optimize_for_inference=true") {
		t.Fatalf("the load did not use optimize_for_inference:\n%s", log.String())
	}
	x := readZooNpy(t, "digits", "ref_input.npy")
	want := f32s(readZooNpy(t, "digits", "ref_output.npy").Data)
	_, outs, err := client.New(s.listen()).Infer(context.Background(), "digits_tensor", "",
		[]oip.Tensor{{Name: "input__0", Datatype: "FP32", Shape: x.Shape, Data: x.Data}}, client.InferOptions{Binary: true})
	if err != nil || len(outs) != 1 || outs[0].Shape[0] != x.Shape[0] {
		t.Fatalf("infer: %v %+v", err, outs)
	}
	// Folding batch norms into convolutions reorders float sums.
	closeTo(t, "optimized output", f32s(outs[0].Data), want, 1e-4)
}
