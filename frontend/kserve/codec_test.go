package kserve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	pb "github.com/torchd/torchd/proto/inference"
)

// The Open Inference Protocol (KServe v2, REST and gRPC) and KServe v1 are tested as codecs
// over a registry whose models are package coretest's runtime double, which doubles each
// float32 of its input: "m" (versions "1" and "2") takes "x", float32 rows of two, and answers
// "y", through the tensor handler. Answers are compared with testdata/*.golden (`go test
// -update` rewrites them); what real models compute is *_models_test.go's (serve_test.go).

type fixture struct {
	rt  *coretest.Runtime
	r   *core.Registry
	api *API
}

func newFixture(t *testing.T, config string) *fixture {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", config+coretest.XConfig, nil))
	if _, err := r.Add("m", "2", core.RegisterRequest{Name: "m", Synchronous: true}, coretest.Archive(t, "tensor", config+coretest.XConfig, nil)); err != nil {
		t.Fatal(err)
	}
	return &fixture{rt: rt, r: r, api: &API{Registry: r, Ready: func() bool { return true }, MaxRequestSize: 1 << 20}}
}

func (f *fixture) do(method, uri, body string, header map[string]string) frontendtest.Response {
	return frontendtest.Do(f.api.Routes(), frontendtest.Request{Method: method, URI: uri, Body: []byte(body), Header: header})
}

// binaryBody is a request of the binary tensor extension: the JSON header, then the tensors'
// bytes; it returns the body and the header's length.
func binaryBody(header string, tensors ...[]byte) (string, map[string]string) {
	b := []byte(header)
	for _, t := range tensors {
		b = append(b, t...)
	}
	return string(b), map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))}
}

func le32(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Metadata, readiness, configuration and health, for the default version and each named
// one; an unknown version is 404 naming it.
func TestV2Metadata(t *testing.T) {
	f := newFixture(t, "")
	for _, c := range []struct{ name, uri string }{
		{"server", "/v2"},
		{"live", "/v2/health/live"},
		{"ready", "/v2/health/ready"},
		{"model", "/v2/models/m"},
		{"model_version_2", "/v2/models/m/versions/2"},
		{"model_unknown_version", "/v2/models/m/versions/9.9"},
		{"model_unknown", "/v2/models/nope"},
		{"model_ready", "/v2/models/m/ready"},
		{"model_version_ready", "/v2/models/m/versions/2/ready"},
		{"model_unknown_version_ready", "/v2/models/m/versions/9.9/ready"},
		{"config", "/v2/models/m/config"},
		{"config_version_2", "/v2/models/m/versions/2/config"},
		{"config_unknown_version", "/v2/models/m/versions/9.9/config"},
		{"v1_model", "/v1/models/m"},
		{"v1_model_unknown", "/v1/models/nope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			frontendtest.Golden(t, "metadata/"+c.name, f.do("GET", c.uri, "", nil))
		})
	}
}

// Inference over REST: JSON tensors in and out, binary tensors either way, a version named,
// outputs asked for by name; the model gets exactly the tensor the request carried.
func TestV2Infer(t *testing.T) {
	f := newFixture(t, "")
	x := le32(1.5, -2, 3.25, 4)
	bin, binHeader := binaryBody(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, x)
	binOut, binOutHeader := binaryBody(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`, x)
	for _, c := range []struct {
		name, uri, body string
		header          map[string]string
	}{
		{"json", "/v2/models/m/infer", `{"id": "r1", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}]}`, nil},
		{"json_nested_data", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1.5, -2], [3.25, 4]]}]}`, nil},
		{"json_version_2", "/v2/models/m/versions/2/infer", `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}]}`, nil},
		{"json_output_named", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}], "outputs": [{"name": "y"}]}`, nil},
		{"json_binary_output", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}], "parameters": {"binary_data_output": true}}`, nil},
		{"binary_input", "/v2/models/m/infer", bin, binHeader},
		{"binary_input_and_output", "/v2/models/m/infer", binOut, binOutHeader},
		{"raw_binary", "/v2/models/m/infer", string(x[:8]), map[string]string{"Inference-Header-Content-Length": "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.do("POST", c.uri, c.body, c.header)
			frontendtest.GoldenBytes(t, "infer/"+c.name, goldenOf(r), r.ContentType == "application/json")
			ver, want, shape := "1", x, "[2 2]"
			if c.name == "json_version_2" {
				ver = "2"
			}
			if c.name == "raw_binary" {
				// A raw body is one row of the model's one input.
				want, shape = x[:8], "[1 2]"
			}
			in := f.rt.Model("m", ver).LastInput()
			if r.Status != 200 || len(in) != 1 || !bytes.Equal(in[0].Data, want) || fmt.Sprint(in[0].Shape) != shape {
				t.Errorf("%d: the model got %+v, want the request's %s tensor", r.Status, in, shape)
			}
		})
	}
}

// goldenOf is Golden's form of an answer (status, content type, the protocol's headers,
// body), for a body that may be binary.
func goldenOf(r frontendtest.Response) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %s\n", r.Status, r.ContentType)
	if v := r.Header.Peek("Inference-Header-Content-Length"); v != nil {
		fmt.Fprintf(&b, "Inference-Header-Content-Length: %s\n", v)
	}
	b.WriteByte('\n')
	b.Write(r.Body)
	return b.Bytes()
}

// Every error of v2 inference answers {"error": msg} with the protocol's status, and the
// model goes on serving.
func TestV2InferErrors(t *testing.T) {
	f := newFixture(t, "")
	short, shortHeader := binaryBody(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, le32(1, 2))
	for _, c := range []struct {
		name, uri, body string
		header          map[string]string
	}{
		{"not_json", "/v2/models/m/infer", `{"inputs": [`, nil},
		{"no_inputs", "/v2/models/m/infer", `{"inputs": []}`, nil},
		{"unknown_model", "/v2/models/nope/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
		{"unknown_version", "/v2/models/m/versions/9/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
		{"wrong_datatype", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}]}`, nil},
		{"unknown_datatype", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP128", "data": [1, 2]}]}`, nil},
		{"wrong_shape", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}`, nil},
		{"data_short_of_shape", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3]}]}`, nil},
		{"data_not_numbers", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": ["a", "b"]}]}`, nil},
		{"negative_dimension", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [-1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
		{"unknown_input", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}, {"name": "z", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
		{"unknown_output", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}], "outputs": [{"name": "nope"}]}`, nil},
		{"binary_data_short", "/v2/models/m/infer", short, shortHeader},
		{"header_length_over_the_body", "/v2/models/m/infer", `{"inputs": []}`, map[string]string{"Inference-Header-Content-Length": "999"}},
		{"header_length_not_a_number", "/v2/models/m/infer", `{"inputs": []}`, map[string]string{"Inference-Header-Content-Length": "ten"}},
		{"timeout_parameter_not_a_number", "/v2/models/m/infer", `{"parameters": {"timeout": "soon"}, "inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
		{"request_timeout_header_malformed", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, map[string]string{"X-Request-Timeout": "soon"}},
		{"unsupported_content_encoding", "/v2/models/m/infer", `{"inputs": []}`, map[string]string{"Content-Encoding": "br"}},
		{"gzip_not_gzip", "/v2/models/m/infer", `{"inputs": []}`, map[string]string{"Content-Encoding": "gzip"}},
		{"v1_without_instances", "/v1/models/m:predict", `{"inputs": 1}`, nil},
		{"v1_not_json", "/v1/models/m:predict", `{"instances": `, nil},
		{"v1_unknown_model", "/v1/models/nope:predict", `{"instances": [[1, 2]]}`, nil},
		{"v1_explain_unsupported", "/v1/models/m:explain", `{"instances": [[1, 2]]}`, nil},
		{"v2_explain_unsupported", "/v2/models/m/explain", `{"inputs": [{"name": "input-0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			frontendtest.Golden(t, "errors/"+c.name, f.do("POST", c.uri, c.body, c.header))
		})
	}
	if r := f.do("POST", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`, nil); r.Status != 200 {
		t.Errorf("after the errors: %d %s", r.Status, r.Body)
	}
}

// The core's refusals as the protocol answers them: a full queue 503 with Retry-After, a
// passed deadline (the timeout parameter, µs, or X-Request-Timeout) 504, a failed model 500.
// The worker is held, so each state is reached whatever the machine's speed; a request
// whose deadline passed never reaches the model.
func TestV2ServerErrors(t *testing.T) {
	f := newFixture(t, "job_queue_size = 1\n")
	m := f.rt.Model("m", "1")
	v, err := f.r.Get("m", "1")
	if err != nil {
		t.Fatal(err)
	}
	const good = `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}`
	done := make(chan frontendtest.Response, 2)
	send := func(body string) {
		go func() {
			for {
				r := f.do("POST", "/v2/models/m/infer", body, nil)
				// A request that arrives as the worker takes the one before it may be refused for a
				// moment: that one's queue place is given back just after the worker has it.
				if r.Status == 503 && v.Pending() == 0 {
					continue
				}
				done <- r
				return
			}
		}()
	}

	held, release := m.Hold()
	send(good)
	<-held
	send(good)
	coretest.WaitFor(t, "a request queued", func() bool { return v.Pending() == 1 })
	frontendtest.Golden(t, "errors/queue_full", f.do("POST", "/v2/models/m/infer", good, nil))
	release()
	for range 2 {
		if r := <-done; r.Status != 200 {
			t.Errorf("a queued request: %d %s", r.Status, r.Body)
		}
	}

	// The rest on a queue of the default size: a request past its deadline keeps its place
	// until the worker reaches it, which a queue of one would show as full.
	f = newFixture(t, "")
	m = f.rt.Model("m", "1")
	if v, err = f.r.Get("m", "1"); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, body string
		header     map[string]string
	}{
		{"timeout_parameter", `{"parameters": {"timeout": 20000}, "inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [7, 7]}]}`, nil},
		{"request_timeout_header", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [7, 7]}]}`, map[string]string{"X-Request-Timeout": "20"}},
	} {
		held, release := m.Hold()
		send(good)
		<-held
		frontendtest.Golden(t, "errors/deadline_"+c.name, f.do("POST", "/v2/models/m/infer", c.body, c.header))
		release()
		<-done
		// The request past its deadline holds its queue place until the worker drops it.
		coretest.WaitFor(t, "the expired request dropped", func() bool { return v.Pending() == 0 })
		for _, in := range m.LastInput() {
			if bytes.Equal(in.Data, le32(7, 7)) {
				t.Errorf("%s: the request past its deadline reached the model", c.name)
			}
		}
	}

	m.FailOn(13)
	frontendtest.Golden(t, "errors/model_fails", f.do("POST", "/v2/models/m/infer", `{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [13, 13]}]}`, nil))
	m.FailOn(0)
}

// KServe v1 goes through the model's handler: instances in, one prediction each out.
func TestV1Predict(t *testing.T) {
	f := newFixture(t, "")
	frontendtest.Golden(t, "v1/predict", f.do("POST", "/v1/models/m:predict", `{"instances": [[1.5, -2], [3.25, 4]]}`, nil))
	if in := f.rt.Model("m", "1").LastInput(); len(in) != 1 || !bytes.Equal(in[0].Data, le32(1.5, -2, 3.25, 4)) {
		t.Errorf("the model got %+v, want the two instances as rows", in)
	}
	// v2 that does not name the model's inputs goes through the handler too (TorchServe's
	// kservev2 envelope): its answer is one output named after the input.
	frontendtest.Golden(t, "v1/v2_through_handler", f.do("POST", "/v2/models/m/infer", `{"id": "e1", "inputs": [{"name": "input-0", "shape": [2, 2], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}]}`, nil))
}

// gRPC's ModelInfer takes the path REST's infer takes: typed contents or raw contents in,
// the same in the answer; errors carry the protocol's codes.
func TestGRPCInfer(t *testing.T) {
	f := newFixture(t, "job_queue_size = 1\n")
	svc := f.api.InferenceService()
	x := le32(1.5, -2, 3.25, 4)
	input := func(name string) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "FP32", Shape: []int64{2, 2},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2, 3.25, 4}}}
	}
	raw := &pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}}
	for _, c := range []struct {
		name string
		req  *pb.ModelInferRequest
	}{
		{"typed", &pb.ModelInferRequest{ModelName: "m", Id: "g1", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x")}}},
		{"typed_version_2", &pb.ModelInferRequest{ModelName: "m", ModelVersion: "2", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x")}}},
		{"raw", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{raw}, RawInputContents: [][]byte{x}}},
		{"through_handler", &pb.ModelInferRequest{ModelName: "m", Id: "g2", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("input-0")}}},
		{"unknown_model", &pb.ModelInferRequest{ModelName: "nope", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x")}}},
		{"unknown_version", &pb.ModelInferRequest{ModelName: "m", ModelVersion: "9", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x")}}},
		{"no_inputs", &pb.ModelInferRequest{ModelName: "m"}},
		{"contents_short_of_shape", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 2},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}}}},
		{"raw_short_of_shape", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{raw}, RawInputContents: [][]byte{x[:4]}}},
		{"wrong_shape", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 3},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3}}}}}},
		{"wrong_datatype", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "INT32", Shape: []int64{1, 2},
			Contents: &pb.InferTensorContents{IntContents: []int32{1, 2}}}}}},
		{"timeout_parameter_not_a_number", &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x")},
			Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "soon"}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := svc.ModelInfer(context.Background(), c.req)
			goldenGRPC(t, "grpc/"+c.name, resp, err)
		})
	}
}

// goldenGRPC compares a gRPC answer with its golden file: the status code and message, and
// the message as protojson (made compact: protojson's spacing is not stable by design).
func goldenGRPC(t *testing.T, name string, resp proto.Message, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	body := []byte("{}")
	if err == nil {
		j, merr := protojson.Marshal(resp)
		if merr != nil {
			t.Fatal(merr)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, j); err != nil {
			t.Fatal(err)
		}
		body = b.Bytes()
	}
	frontendtest.GoldenBytes(t, name, fmt.Appendf(nil, "%s %s\n\n%s", st.Code(), st.Message(), body), true)
}

// gRPC's answers to the core's refusals: the timeout parameter (µs) and the call's own
// deadline are DEADLINE_EXCEEDED, a full queue UNAVAILABLE, a failed model INTERNAL; the
// worker is held meanwhile, and the model serves on after.
func TestGRPCServerErrors(t *testing.T) {
	req := func(x float32) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{x, x}}}}}
	}
	f := newFixture(t, "")
	svc := f.api.InferenceService()
	m := f.rt.Model("m", "1")
	done := make(chan error, 2)
	var v *core.ModelVersion // the queue send waits on, once there is one
	send := func(svc pb.GRPCInferenceServiceServer) {
		go func() {
			for {
				_, err := svc.ModelInfer(context.Background(), req(1))
				// A request that arrives as the worker takes the one before it may be refused for a
				// moment: that one's queue place is given back just after the worker has it.
				if st, _ := status.FromError(err); st.Code() == codes.Unavailable && v != nil && v.Pending() == 0 {
					continue
				}
				done <- err
				return
			}
		}()
	}

	held, release := m.Hold()
	send(svc)
	<-held
	withTimeout := req(7)
	withTimeout.Parameters = map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 20000}}}
	resp, err := svc.ModelInfer(context.Background(), withTimeout)
	goldenGRPC(t, "grpc/deadline_timeout_parameter", resp, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = svc.ModelInfer(ctx, req(7))
	cancel()
	if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded {
		t.Errorf("a call past its own deadline: %v, want DeadlineExceeded", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ModelInfer(context.Background(), req(1)); err != nil {
		t.Fatal(err)
	}
	for _, in := range m.LastInput() {
		if bytes.Equal(in.Data, le32(7, 7)) {
			t.Error("a request past its deadline reached the model")
		}
	}

	m.FailOn(13)
	resp, err = svc.ModelInfer(context.Background(), req(13))
	goldenGRPC(t, "grpc/model_fails", resp, err)
	m.FailOn(0)
	fp16 := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP16", Shape: []int64{1}}}}
	resp, err = svc.ModelInfer(context.Background(), fp16)
	goldenGRPC(t, "grpc/fp16_typed_contents", resp, err)
	if _, err := svc.ModelInfer(context.Background(), req(1)); err != nil {
		t.Errorf("after the failures: %v", err)
	}

	small := newFixture(t, "job_queue_size = 1\n")
	svc = small.api.InferenceService()
	v, err = small.r.Get("m", "1")
	if err != nil {
		t.Fatal(err)
	}
	held, release = small.rt.Model("m", "1").Hold()
	send(svc)
	<-held
	send(svc)
	coretest.WaitFor(t, "a request queued", func() bool { return v.Pending() == 1 })
	resp, err = svc.ModelInfer(context.Background(), req(1))
	goldenGRPC(t, "grpc/queue_full", resp, err)
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a queued request: %v", err)
		}
	}
}

// gRPC's health, metadata, configuration and statistics calls answer what REST's do (the
// golden files of metadata/ beside grpc/), unknown models NOT_FOUND; the calls torchd does not
// serve are UNIMPLEMENTED.
func TestGRPCMetadata(t *testing.T) {
	f := newFixture(t, "")
	svc := f.api.InferenceService()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func() (proto.Message, error)
	}{
		{"server_live", func() (proto.Message, error) { return svc.ServerLive(ctx, &pb.ServerLiveRequest{}) }},
		{"server_ready", func() (proto.Message, error) { return svc.ServerReady(ctx, &pb.ServerReadyRequest{}) }},
		{"server_metadata", func() (proto.Message, error) { return svc.ServerMetadata(ctx, &pb.ServerMetadataRequest{}) }},
		{"model_ready", func() (proto.Message, error) { return svc.ModelReady(ctx, &pb.ModelReadyRequest{Name: "m"}) }},
		{"model_version_ready", func() (proto.Message, error) {
			return svc.ModelReady(ctx, &pb.ModelReadyRequest{Name: "m", Version: "2"})
		}},
		{"model_unknown_ready", func() (proto.Message, error) { return svc.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"}) }},
		{"model_metadata", func() (proto.Message, error) { return svc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "m"}) }},
		{"model_unknown_metadata", func() (proto.Message, error) { return svc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}) }},
		{"model_unknown_version_metadata", func() (proto.Message, error) {
			return svc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "m", Version: "9.9"})
		}},
		{"model_config", func() (proto.Message, error) { return svc.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "m"}) }},
		{"model_unknown_config", func() (proto.Message, error) { return svc.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "nope"}) }},
		{"model_unknown_statistics", func() (proto.Message, error) {
			return svc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"})
		}},
		{"shared_memory_unimplemented", func() (proto.Message, error) {
			return svc.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := c.call()
			goldenGRPC(t, "grpc/"+c.name, resp, err)
		})
	}

	// Statistics count what was served (their times are the machine's: not in a golden file).
	for range 2 {
		if _, err := svc.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32",
			Shape: []int64{2, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := svc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "m", Version: "1"})
	if err != nil || len(st.GetModelStats()) != 1 {
		t.Fatalf("statistics: %v %v", st, err)
	}
	if s := st.GetModelStats()[0]; s.GetInferenceStats().GetSuccess().GetCount() != 2 || s.GetInferenceCount() != 4 || s.GetExecutionCount() != 2 || s.GetLastInference() == 0 {
		t.Errorf("statistics after two requests of two rows: %v", s)
	}
	all, err := svc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil || len(all.GetModelStats()) != 2 {
		t.Errorf("every version's statistics: %v %v", all, err)
	}
}

// datatypeOfName answers the same from its cache as the first time.
func TestDatatypeOfName(t *testing.T) {
	for range 2 {
		for name, want := range map[string]string{"float32": "FP32", "int64": "INT64", "bool": "BOOL", "string": "BYTES", "fp8": "FP8"} {
			if got := datatypeOfName(name); got != want {
				t.Errorf("datatypeOfName(%q) = %q, want %q", name, got, want)
			}
		}
	}
}

// The configuration of a model served from an archive shows its preferred batch sizes, those
// above the batch size in use passed over as the batcher passes over them.
func TestV2ConfigPreferredBatchSizes(t *testing.T) {
	f := newFixture(t, "batch_size = 8\npreferred_batch_size = [16, 4, 2]\n")
	var cfg struct {
		MaxBatchSize int `json:"max_batch_size"`
		Batching     struct {
			Preferred []int `json:"preferred_batch_size"`
		} `json:"dynamic_batching"`
	}
	r := f.do("GET", "/v2/models/m/config", "", nil)
	if err := json.Unmarshal(r.Body, &cfg); err != nil || r.Status != 200 {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
	if cfg.MaxBatchSize != 8 || fmt.Sprint(cfg.Batching.Preferred) != "[2 4]" {
		t.Fatalf("config %s", r.Body)
	}
}
