package oip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/torchd/torchd/proto/inference"
)

func le32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// Typed and raw contents decode to the same bytes as REST's JSON and binary data.
func TestDecodeInferRequestTypedAndRaw(t *testing.T) {
	typed := &pb.ModelInferRequest{
		Id:         "a",
		Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 5}}},
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}},
			{Name: "i", Datatype: "INT8", Shape: []int64{2}, Contents: &pb.InferTensorContents{IntContents: []int32{-128, 127}}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("hi")}}},
			{Name: "b", Datatype: "BOOL", Shape: []int64{2}, Contents: &pb.InferTensorContents{BoolContents: []bool{true, false}}},
		},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y"}},
	}
	req, ts, err := DecodeInferRequest(typed)
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "a" || req.Parameters["timeout"] != float64(5) || req.Outputs[0].Name != "y" {
		t.Fatalf("request %+v", req)
	}
	want := [][]byte{le32(1.5, -2), {0x80, 0x7f}, {2, 0, 0, 0, 'h', 'i'}, {1, 0}}
	for i, w := range want {
		if !bytes.Equal(ts[i].Data, w) {
			t.Errorf("%s: %v, want %v", ts[i].Name, ts[i].Data, w)
		}
	}
	raw := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}},
		{Name: "h", Datatype: "FP16", Shape: []int64{1}},
	}, RawInputContents: [][]byte{le32(1.5, -2), {0, 0x3c}}}
	_, ts, err = DecodeInferRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ts[0].Data, want[0]) || !bytes.Equal(ts[1].Data, []byte{0, 0x3c}) {
		t.Fatalf("raw tensors %v", ts)
	}
}

func TestDecodeInferRequestErrors(t *testing.T) {
	in := func(name, dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape, Contents: c}
	}
	for _, tc := range []struct {
		name string
		m    *pb.ModelInferRequest
		want string
	}{
		{"raw size", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{1, 3}, nil)}, RawInputContents: [][]byte{le32(1, 2)}}, "3 elements of FP32 need 12 bytes, got 8"},
		{"raw count", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{1}, nil), in("y", "FP32", []int64{1}, nil)}, RawInputContents: [][]byte{le32(1)}}, "raw_input_contents has 1 entries for 2 inputs"},
		{"both", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{1}, &pb.InferTensorContents{Fp32Contents: []float32{1}})}, RawInputContents: [][]byte{le32(1)}}, "both contents and raw_input_contents"},
		{"typed count", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{2, 2}, &pb.InferTensorContents{Fp32Contents: []float32{1}})}}, "needs 4 elements in contents.fp32_contents, got 1"},
		{"wrong field", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "INT64", []int64{1}, &pb.InferTensorContents{IntContents: []int32{1}})}}, "contents.int64_contents, got 0"},
		{"range", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "UINT8", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{256}})}}, "does not fit UINT8"},
		{"fp16 typed", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP16", []int64{1}, nil)}}, "FP16 has no typed contents"},
		{"bool", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "BOOL", []int64{1}, nil)}, RawInputContents: [][]byte{{2}}}, "must be 0 or 1"},
		{"bytes", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "BYTES", []int64{1}, nil)}, RawInputContents: [][]byte{{9, 0, 0, 0, 'a'}}}, "runs past the data"},
		{"datatype", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP8", []int64{1}, nil)}}, `unknown datatype "FP8"`},
		{"duplicate", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{1}, &pb.InferTensorContents{Fp32Contents: []float32{1}}), in("x", "FP32", []int64{1}, nil)}}, `duplicate input name "x"`},
		{"shape", &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", []int64{-1}, nil)}}, "negative dimension"},
	} {
		_, _, err := DecodeInferRequest(tc.m)
		if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a bad request with %q", tc.name, err, tc.want)
		}
	}
}

// Typed outputs decode back to the bytes they came from; FP16 makes every output raw.
func TestEncodeInferResponse(t *testing.T) {
	outs := []Tensor{
		{Name: "y", Datatype: "FP32", Shape: []int64{2}, Data: le32(0.25, 3)},
		{Name: "n", Datatype: "INT16", Shape: []int64{1}, Data: []byte{0xff, 0xff}},
	}
	m, err := EncodeInferResponse(&InferResponse{ModelName: "m", ModelVersion: "1", ID: "q"}, outs, false)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetId() != "q" || len(m.GetRawOutputContents()) != 0 || m.GetOutputs()[0].GetContents().GetFp32Contents()[1] != 3 || m.GetOutputs()[1].GetContents().GetIntContents()[0] != -1 {
		t.Fatalf("typed response %v", m)
	}
	outs = append(outs, Tensor{Name: "h", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0, 0x3c}})
	m, err = EncodeInferResponse(&InferResponse{ModelName: "m"}, outs, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.GetRawOutputContents()) != 3 || m.GetOutputs()[0].GetContents() != nil || !bytes.Equal(m.GetRawOutputContents()[0], outs[0].Data) {
		t.Fatalf("raw response %v", m)
	}
	if _, err := EncodeInferResponse(&InferResponse{}, []Tensor{{Name: "y", Datatype: "FP32", Shape: []int64{3}, Data: le32(1)}}, true); err == nil {
		t.Fatal("a tensor whose data does not match its shape was encoded")
	}
}

func TestJSONTensor(t *testing.T) {
	tt, err := JSONTensor(ResponseOutput{Name: "p", Datatype: "FP64", Shape: []int64{2}, Data: []any{1.5, 2}})
	if err != nil || len(tt.Data) != 16 || math.Float64frombits(binary.LittleEndian.Uint64(tt.Data)) != 1.5 {
		t.Fatalf("%v %v", tt, err)
	}
	tt, err = JSONTensor(ResponseOutput{Name: "p", Datatype: "BYTES", Shape: []int64{2}, Data: []any{"cat", map[string]any{"a": 1}}})
	if err != nil || !bytes.Equal(tt.Data, append([]byte{3, 0, 0, 0, 'c', 'a', 't', 7, 0, 0, 0}, `{"a":1}`...)) {
		t.Fatalf("%q %v", tt.Data, err)
	}
}

// A huge shape with few elements is refused before anything is allocated for it.
func TestDecodeInferRequestHugeShape(t *testing.T) {
	m := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP64", Shape: []int64{1 << 30, 1 << 20},
		Contents: &pb.InferTensorContents{Fp64Contents: []float64{1}}}}}
	if _, _, err := DecodeInferRequest(m); err == nil || !strings.Contains(err.Error(), "got 1") {
		t.Fatalf("%v", err)
	}
}

// Whatever the bytes, decoding a gRPC infer request never panics, and every tensor it
// accepts holds exactly the data its datatype and shape need.
func FuzzDecodeInferRequest(f *testing.F) {
	seed := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2}}},
		{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a")}}},
	}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	raw := &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "b", Datatype: "BOOL", Shape: []int64{2}}}, RawInputContents: [][]byte{{0, 1}}}
	b, _ = proto.Marshal(raw)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.ModelInferRequest
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		_, ts, err := DecodeInferRequest(&m)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("an error that is not a bad request: %v", err)
			}
			return
		}
		for i := range ts {
			if err := checkTensor(&ts[i]); err != nil {
				t.Fatalf("accepted %+v: %v", ts[i], err)
			}
		}
	})
}
