package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/torch"
)

// FuzzDecodeJSONTensor checks the JSON tensor scanner against a plain reference: decode with
// encoding/json into []any, walk it, convert each number. For any body the two must agree on
// success, shape and bytes; every failure must be a 400 with a message; and the tensor
// handler's checks on top must never panic. The seed corpus is in
// testdata/fuzz/FuzzDecodeJSONTensor.
//
//	go test -run='^$' -fuzz=FuzzDecodeJSONTensor -fuzztime=2m ./handlers/
func FuzzDecodeJSONTensor(f *testing.F) {
	f.Add([]byte(`[[1, 2.5], [3, -4e2]]`))
	f.Add([]byte(`{"data": [1, 2, 3, 4], "shape": [2, 2], "dtype": "int64"}`))
	f.Add([]byte(`{"data": [[true, false]], "dtype": "bool"}`))
	f.Add([]byte(`[[1, 2], [3]]`))
	h := &TensorHandler{ins: []archive.TensorSpec{{Name: "x", DType: "float32", Shape: []int64{-1, 2, 2}}}}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeJSONTensor(b)
		want, refErr := referenceJSONTensor(b)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("scanner: %v; reference: %v", err, refErr)
		}
		if err != nil {
			if !errors.Is(err, errkind.BadInput) || err.Error() == "" {
				t.Fatalf("not a 400 with a message: %v", err)
			}
		} else {
			if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("scanner %v %v %x; reference %v %v %x", got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
			}
			if int64(len(got.Data)) != got.Numel()*int64(got.DType.Size()) {
				t.Fatalf("%d bytes for shape %v of %v", len(got.Data), got.Shape, got.DType)
			}
		}
		s, err := h.Preprocess(&Request{Inputs: []Payload{{Name: "body", ContentType: "application/json", Data: b}}, Header: func(string) string { return "" }})
		if err != nil {
			if !errors.Is(err, errkind.BadInput) {
				t.Fatalf("Preprocess: not a 400: %v", err)
			}
			return
		}
		tn := s.Tensors[0]
		if s.Items < 1 || int64(s.Items) != tn.Shape[0] || len(tn.Shape) != 3 || tn.Shape[1] != 2 || tn.Shape[2] != 2 || int64(len(tn.Data)) != 4*tn.Numel() {
			t.Fatalf("Preprocess accepted %d items of %v with %d bytes", s.Items, tn.Shape, len(tn.Data))
		}
	})
}

// referenceJSONTensor is decodeJSONTensor as it was before the scanner: encoding/json into
// []any, then a recursive walk. It is slow and obviously right.
func referenceJSONTensor(b []byte) (Tensor, error) {
	if !json.Valid(b) {
		return Tensor{}, BadInput("invalid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Tensor{}, err
	}
	dtype := torch.Float32
	var shape []int64
	if obj, ok := v.(map[string]any); ok {
		data, ok := obj["data"]
		if !ok {
			return Tensor{}, BadInput("no data")
		}
		if s, ok := obj["dtype"].(string); ok && s != "" {
			dt, err := torch.ParseDType(s)
			if err != nil || dt == torch.Float16 || dt == torch.BFloat16 {
				return Tensor{}, BadInput("dtype")
			}
			dtype = dt
		}
		if raw, ok := obj["shape"]; ok {
			list, ok := raw.([]any)
			if !ok {
				return Tensor{}, BadInput("shape")
			}
			shape = []int64{}
			for _, e := range list {
				num, ok := e.(json.Number)
				if !ok {
					return Tensor{}, BadInput("shape")
				}
				n, err := strconv.ParseInt(string(num), 10, 64)
				if err != nil || n < 0 {
					return Tensor{}, BadInput("shape")
				}
				shape = append(shape, n)
			}
		}
		v = data
	}
	var flat []any
	nested, err := referenceFlatten(v, 0, &flat)
	if err != nil {
		return Tensor{}, err
	}
	if shape == nil {
		shape = nested
	} else {
		n := int64(1)
		for _, d := range shape {
			if d != 0 && n > maxJSONElements/d {
				return Tensor{}, BadInput("too large")
			}
			n *= d
		}
		if n != int64(len(flat)) {
			return Tensor{}, BadInput("count")
		}
	}
	size := dtype.Size()
	data := make([]byte, size*len(flat))
	for i, e := range flat {
		var tok []byte
		switch x := e.(type) {
		case json.Number:
			tok = []byte(x)
		case bool:
			tok = []byte("0")
			if x {
				tok = []byte("1")
			}
		default:
			return Tensor{}, BadInput("not a number")
		}
		if err := putJSONNumber(data[i*size:], dtype, tok); err != nil {
			return Tensor{}, BadInput("%v", err)
		}
	}
	return Tensor{DType: dtype, Shape: shape, Data: data}, nil
}

func referenceFlatten(v any, depth int, out *[]any) ([]int64, error) {
	if depth > maxJSONDepth {
		return nil, BadInput("deep")
	}
	list, ok := v.([]any)
	if !ok {
		if len(*out) >= maxJSONElements {
			return nil, BadInput("many")
		}
		*out = append(*out, v)
		return []int64{}, nil
	}
	var inner []int64
	for i, e := range list {
		s, err := referenceFlatten(e, depth+1, out)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			inner = s
		} else if !slices.Equal(s, inner) {
			return nil, BadInput("ragged")
		}
	}
	return append([]int64{int64(len(list))}, inner...), nil
}
