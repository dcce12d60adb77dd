package oip

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// resnetBatch is a binary [32,3,224,224] FP32 tensor: a ResNet batch, 19 MB.
func resnetBatch(n int64) Tensor {
	shape := []int64{n, 3, 224, 224}
	data := make([]byte, n*3*224*224*4)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < len(data); i += 4 {
		r := rng.Uint32() // a random mantissa; the top byte 0x3f makes values in [0.5, 2)
		data[i], data[i+1], data[i+2], data[i+3] = byte(r), byte(r>>8), byte(r>>16), 0x3f
	}
	return Tensor{Name: "INPUT__0", Datatype: "FP32", Shape: shape, Data: data}
}

// BenchmarkDecodeRequest decodes a binary request as perf_analyzer sends it. Binary data is
// taken from the body without copying, so the cost is the JSON header's and independent of
// the tensor's size.
func BenchmarkDecodeRequest(b *testing.B) {
	req := &InferRequest{Outputs: []RequestOutput{{Name: "OUTPUT__0", Parameters: Parameters{"binary_data": true}}}}
	body, hl, err := EncodeRequest(req, []Tensor{resnetBatch(32)}, true)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRequest(body, hl, "", 32<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResponse encodes the same tensor as a binary output: one allocation of the
// body and one copy, so it should run at memcpy speed.
func BenchmarkEncodeResponse(b *testing.B) {
	outs := []Tensor{resnetBatch(32)}
	outs[0].Name = "OUTPUT__0"
	resp := &InferResponse{ModelName: "resnet50", ModelVersion: "1"}
	b.SetBytes(int64(len(outs[0].Data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := EncodeResponse(resp, outs, func(string) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemcpy is the yardstick for BenchmarkEncodeResponse: allocating and copying the
// same number of bytes.
func BenchmarkMemcpy(b *testing.B) {
	src := resnetBatch(32).Data
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		dst := make([]byte, len(src))
		copy(dst, src)
	}
}

// BenchmarkDecodeRequestGzip adds gzip, which dominates: compression is for slow links.
func BenchmarkDecodeRequestGzip(b *testing.B) {
	body, hl, err := EncodeRequest(&InferRequest{}, []Tensor{resnetBatch(32)}, true)
	if err != nil {
		b.Fatal(err)
	}
	gz := gzipped(b, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRequest(gz, hl, "gzip", 32<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// The JSON forms of one image, for comparison: JSON is the slow path.
func BenchmarkDecodeRequestJSON(b *testing.B) {
	body, _, err := EncodeRequest(&InferRequest{}, []Tensor{resnetBatch(1)}, false)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRequest(body, -1, "", 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResponseJSON(b *testing.B) {
	outs := []Tensor{resnetBatch(1)}
	b.SetBytes(int64(len(outs[0].Data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := EncodeResponse(&InferResponse{ModelName: "m"}, outs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResponseSmall is a tiny model's answer (ONNX MNIST's ten logits, as JSON),
// where the response's fixed costs, not its data, are what a request pays.
func BenchmarkEncodeResponseSmall(b *testing.B) {
	data := make([]byte, 40)
	for i := range 10 {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)*0.37-1.5))
	}
	outs := []Tensor{{Name: "19", Datatype: "FP32", Shape: []int64{1, 10}, Data: data}}
	resp := &InferResponse{ModelName: "onnx-mnist-cpu", ModelVersion: "1", ID: "42"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := EncodeResponse(resp, outs, nil); err != nil {
			b.Fatal(err)
		}
	}
}
