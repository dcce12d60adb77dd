package oip

import (
	"errors"
	"strings"
	"testing"
)

var fuzzDatatypes = []string{"FP32", "INT64", "UINT8", "BOOL", "FP16", "BYTES", "INT16", "FP8"}

// FuzzDecodeRawRequest feeds DecodeRawRequest (Inference-Header-Content-Length: 0: the body
// is the one input's data) arbitrary bodies and model inputs of any datatype and a shape of
// up to three dimensions, -1 or negative ones included. It must not panic; a failure is the
// client's (ErrBadRequest) unless the model's metadata itself is unusable; and an accepted
// tensor is consistent, has no -1 left, and survives re-encoding as an ordinary binary
// request. The seed corpus is in testdata/fuzz/FuzzDecodeRawRequest.
//
//	go test -run='^$' -fuzz=FuzzDecodeRawRequest -fuzztime=2m ./oip/
func FuzzDecodeRawRequest(f *testing.F) {
	f.Add(make([]byte, 16), uint8(0), uint8(0), uint8(2), int64(-1), int64(4), int64(0), true)
	f.Add([]byte("caf\xe9"), uint8(0), uint8(5), uint8(1), int64(-1), int64(0), int64(0), true)
	f.Add(gzipped(f, make([]byte, 64)), uint8(1), uint8(1), uint8(3), int64(1), int64(-1), int64(2), false)
	f.Add([]byte{0, 1, 2}, uint8(0), uint8(3), uint8(1), int64(3), int64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, body []byte, enc, dt, rank uint8, d0, d1, d2 int64, batched bool) {
		shape := []int64{d0, d1, d2}[:int(rank)%4]
		input := MetadataTensor{Name: "x", Datatype: fuzzDatatypes[int(dt)%len(fuzzDatatypes)], Shape: shape}
		req, ts, err := DecodeRawRequest(body, fuzzEncodings[int(enc)%len(fuzzEncodings)], 1<<20, input, batched)
		if err != nil {
			serverSide := DatatypeSize(input.Datatype) < 0 || batched && len(shape) == 0
			if !errors.Is(err, ErrBadRequest) && !(serverSide && strings.HasPrefix(err.Error(), "oip: raw request:")) {
				t.Fatalf("error %q is neither the client's nor about the model's metadata", err)
			}
			return
		}
		if len(ts) != 1 || len(req.Inputs) != 1 || ts[0].Datatype != input.Datatype || len(ts[0].Shape) != len(shape) {
			t.Fatalf("accepted %d tensors %+v for input %+v", len(ts), ts, input)
		}
		for i, d := range ts[0].Shape {
			if d < 0 || shape[i] >= 0 && d != shape[i] && !(batched && i == 0) {
				t.Fatalf("shape %v for the declared %v (batched %v)", ts[0].Shape, shape, batched)
			}
		}
		if batched && ts[0].Shape[0] != 1 {
			t.Fatalf("batched raw request of batch %d", ts[0].Shape[0])
		}
		if err := checkTensor(&ts[0]); err != nil {
			t.Fatalf("accepted an inconsistent tensor: %v", err)
		}
		if !req.WantsBinary("x") {
			t.Fatal("a raw request's outputs must be binary")
		}
		again, hl, err := EncodeRequest(&InferRequest{}, ts, true)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		_, ts2, err := DecodeRequest(again, hl, "", 0)
		if err != nil {
			t.Fatalf("decoding the re-encoded request: %v", err)
		}
		assertTensors(t, ts2, ts)
	})
}
