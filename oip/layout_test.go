package oip

import (
	"bytes"
	"slices"
	"testing"
)

// The bodies in this file are written out by hand from the binary tensor data extension:
// JSON header, then each binary tensor's little-endian row-major bytes in header order; a
// BYTES element is a 4-byte little-endian length and then the bytes.

// fp32x4 is [[1,2],[3,4]] as FP32: 1.0 = 0x3f800000, 2.0 = 0x40000000, 3.0 = 0x40400000, 4.0 = 0x40800000.
var fp32x4 = []byte{
	0x00, 0x00, 0x80, 0x3f,
	0x00, 0x00, 0x00, 0x40,
	0x00, 0x00, 0x40, 0x40,
	0x00, 0x00, 0x80, 0x40,
}

// bytesABC is the BYTES tensor ["ab", "c"].
var bytesABC = []byte{0x02, 0x00, 0x00, 0x00, 'a', 'b', 0x01, 0x00, 0x00, 0x00, 'c'}

const layoutRequestHeader = `{"id":"7","inputs":[` +
	`{"name":"x","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}},` +
	`{"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}],` +
	`"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`

func layoutRequestBody() []byte {
	return slices.Concat([]byte(layoutRequestHeader), fp32x4, bytesABC)
}

func TestDecodeRequestHandWrittenLayout(t *testing.T) {
	body := layoutRequestBody()
	req, ts, err := DecodeRequest(body, len(layoutRequestHeader), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "7" || len(req.Inputs) != 2 || len(req.Outputs) != 1 || req.Outputs[0].Name != "y" {
		t.Fatalf("request = %+v", req)
	}
	if !req.WantsBinary("y") {
		t.Error("output y asked for binary_data")
	}
	want := []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	assertTensors(t, ts, want)
	// Binary data is not copied: it aliases the body.
	if &ts[0].Data[0] != &body[len(layoutRequestHeader)] {
		t.Error("binary tensor data was copied; it should alias the body")
	}
	for _, in := range req.Inputs {
		if in.Data != nil {
			t.Errorf("input %s: Data = %v, want nil (the data is in the tensor)", in.Name, in.Data)
		}
	}
}

func TestEncodeRequestHandWrittenLayout(t *testing.T) {
	req := &InferRequest{ID: "7", Outputs: []RequestOutput{{Name: "y", Parameters: Parameters{"binary_data": true}}}}
	ins := []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	body, hl, err := EncodeRequest(req, ins, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := layoutRequestBody(); !bytes.Equal(body, want) {
		t.Errorf("body =\n%q\nwant\n%q", body, want)
	}
	if hl != len(layoutRequestHeader) {
		t.Errorf("headerLen = %d, want %d", hl, len(layoutRequestHeader))
	}
}

func TestEncodeRequestJSONLayout(t *testing.T) {
	ins := []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	body, hl, err := EncodeRequest(&InferRequest{Parameters: Parameters{"priority": 1}}, ins, false)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"parameters":{"priority":1},"inputs":[` +
		`{"name":"x","datatype":"FP32","shape":[2,2],"data":[1.00000000e+00,2.00000000e+00,3.00000000e+00,4.00000000e+00]},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["ab","c"]}]}`
	if string(body) != want || hl != -1 {
		t.Errorf("body, headerLen =\n%s, %d\nwant\n%s, -1", body, hl, want)
	}
}

// layoutResponseHeader has y (FP32 [1.5, -2]) binary and z (INT32) as JSON, with no
// "parameters" on z: Triton's C++ client rejects an output whose parameters lack binary_data_size.
const layoutResponseHeader = `{"model_name":"m","model_version":"1","id":"r1","outputs":[` +
	`{"name":"y","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},` +
	`{"name":"z","datatype":"INT32","shape":[3],"data":[1,-2,3]},` +
	`{"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]}`

// 1.5 = 0x3fc00000, -2.0 = 0xc0000000.
var fp32Pair = []byte{0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0}

// int32Triple is [1, -2, 3] as INT32.
var int32Triple = []byte{0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00}

func TestEncodeResponseHandWrittenLayout(t *testing.T) {
	resp := &InferResponse{ModelName: "m", ModelVersion: "1", ID: "r1"}
	outs := []Tensor{
		{Name: "y", Datatype: "FP32", Shape: []int64{2}, Data: fp32Pair},
		{Name: "z", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	body, hl, err := EncodeResponse(resp, outs, func(name string) bool { return name != "z" })
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat([]byte(layoutResponseHeader), fp32Pair, bytesABC)
	if !bytes.Equal(body, want) {
		t.Errorf("body =\n%q\nwant\n%q", body, want)
	}
	if hl != len(layoutResponseHeader) {
		t.Errorf("headerLen = %d, want %d", hl, len(layoutResponseHeader))
	}
}

func TestEncodeResponseAllJSONHasNoHeader(t *testing.T) {
	outs := []Tensor{
		{Name: "z", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple},
		{Name: "b", Datatype: "BOOL", Shape: []int64{2}, Data: []byte{1, 0}},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	body, hl, err := EncodeResponse(&InferResponse{ModelName: "m"}, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model_name":"m","outputs":[` +
		`{"name":"z","datatype":"INT32","shape":[3],"data":[1,-2,3]},` +
		`{"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["ab","c"]}]}`
	if string(body) != want || hl != -1 {
		t.Errorf("body, headerLen =\n%s, %d\nwant\n%s, -1", body, hl, want)
	}
}

func TestDecodeResponseHandWrittenLayout(t *testing.T) {
	// Written the way Triton orders its fields, which differs from ours.
	header := `{"model_name":"simple","model_version":"1","outputs":[` +
		`{"name":"OUTPUT0","datatype":"INT32","shape":[3],"parameters":{"binary_data_size":12}},` +
		`{"name":"OUTPUT1","datatype":"BYTES","shape":[1,2],"data":[["ab","c"]]},` +
		`{"name":"OUTPUT2","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}}]}`
	body := slices.Concat([]byte(header), int32Triple, fp32x4)
	resp, ts, err := DecodeResponse(body, len(header))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ModelName != "simple" || resp.ModelVersion != "1" || len(resp.Outputs) != 3 {
		t.Fatalf("response = %+v", resp)
	}
	assertTensors(t, ts, []Tensor{
		{Name: "OUTPUT0", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple},
		{Name: "OUTPUT1", Datatype: "BYTES", Shape: []int64{1, 2}, Data: bytesABC},
		{Name: "OUTPUT2", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
	})
}

func TestDecodeRequestJSONLayout(t *testing.T) {
	body := `{"inputs":[` +
		`{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2],[3,4]]},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["ab","c"]},` +
		`{"name":"i","datatype":"INT32","shape":[3],"data":[1,-2,3]}]}`
	_, ts, err := DecodeRequest([]byte(body), -1, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, ts, []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
		{Name: "i", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple},
	})
}

// A pure JSON request that still sends Inference-Header-Content-Length, as Triton's C++
// client always does, has a header length equal to the body's.
func TestDecodeRequestHeaderLengthIsWholeBody(t *testing.T) {
	body := `{"inputs":[{"name":"i","datatype":"INT32","shape":[3],"data":[1,-2,3]}]}`
	_, ts, err := DecodeRequest([]byte(body), len(body), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, ts, []Tensor{{Name: "i", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple}})
}

func assertTensors(t *testing.T, got, want []Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Datatype != w.Datatype || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %d = {%s %s %v % x}\nwant {%s %s %v % x}", i, g.Name, g.Datatype, g.Shape, g.Data, w.Name, w.Datatype, w.Shape, w.Data)
		}
	}
}
