package oip

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

var allDatatypes = []string{"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"}

func TestDatatypeSize(t *testing.T) {
	want := map[string]int{"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
		"FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2, "BYTES": 0, "": -1, "fp32": -1, "FP8": -1, "STRING": -1}
	for dt, n := range want {
		if got := DatatypeSize(dt); got != n {
			t.Errorf("DatatypeSize(%q) = %d, want %d", dt, got, n)
		}
	}
}

// sampleTensor returns a [2,3,4] tensor of datatype with random values plus the datatype's
// edge values; for floats, finite values only when finite is set (JSON has no NaN or infinity).
func sampleTensor(rng *rand.Rand, datatype string, finite bool) Tensor {
	shape := []int64{2, 3, 4}
	n := 24
	size := DatatypeSize(datatype)
	var data []byte
	switch datatype {
	case "BYTES":
		elems := []string{"ab", "", "c", "ü", "quote\" back\\ nl\n ctl\x01 tab\t", "\u2028 emoji 🙂", "<&>"}
		for i := range n {
			s := elems[i%len(elems)]
			data = binary.LittleEndian.AppendUint32(data, uint32(len(s)))
			data = append(data, s...)
		}
	case "BOOL":
		data = make([]byte, n)
		for i := range data {
			data[i] = byte(rng.IntN(2))
		}
	default:
		data = make([]byte, n*size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		put := func(i int, bits uint64) {
			switch size {
			case 2:
				binary.LittleEndian.PutUint16(data[i*size:], uint16(bits))
			case 4:
				binary.LittleEndian.PutUint32(data[i*size:], uint32(bits))
			case 8:
				binary.LittleEndian.PutUint64(data[i*size:], bits)
			}
		}
		switch datatype {
		case "FP32":
			for i, f := range []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32, 0x1p-126, 0.1, 1e-7, 16777217} {
				put(i, uint64(math.Float32bits(f)))
			}
			for i := 9; i < n; i++ {
				if finite {
					if b := binary.LittleEndian.Uint32(data[i*4:]); b>>23&0xff == 0xff {
						put(i, uint64(b&^(1<<23))) // clear an exponent bit: finite
					}
				}
			}
		case "FP64":
			for i, f := range []float64{0, math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64, 0x1p-1022, 0.1, 1e300, 1 << 53} {
				put(i, math.Float64bits(f))
			}
			for i := 9; i < n; i++ {
				if finite {
					if b := binary.LittleEndian.Uint64(data[i*8:]); b>>52&0x7ff == 0x7ff {
						put(i, b&^(1<<52))
					}
				}
			}
		case "INT64", "UINT64":
			put(0, 1<<63)          // MinInt64, or 2^63 unsigned
			put(1, 1<<63-1)        // MaxInt64
			put(2, math.MaxUint64) // -1, or MaxUint64
			put(3, 1<<53+1)        // not exact as a float64
		default:
			put(0, 0)
			put(1, math.MaxUint64) // all bits set: -1 or the unsigned maximum
			put(2, 1<<(size*8-1))  // the signed minimum
		}
	}
	return Tensor{Name: "t_" + datatype, Datatype: datatype, Shape: shape, Data: data}
}

// Every datatype round-trips byte for byte through request and response bodies: as JSON for
// all but FP16 and BF16, and as binary for all.
func TestRoundTripEveryDatatype(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range allDatatypes {
		for _, bin := range []bool{false, true} {
			in := sampleTensor(rng, dt, true)
			other := Tensor{Name: "other", Datatype: "INT32", Shape: []int64{3}, Data: int32Triple}
			ins := []Tensor{in, other}
			wantJSON := !bin && dt != "FP16" && dt != "BF16"

			body, hl, err := EncodeRequest(&InferRequest{ID: "rt"}, ins, bin)
			if err != nil {
				t.Fatalf("%s binary=%v: EncodeRequest: %v", dt, bin, err)
			}
			if wantJSON != (hl == -1) {
				t.Errorf("%s binary=%v: request headerLen = %d", dt, bin, hl)
			}
			if wantJSON != bytes.Contains(body, []byte(`"shape":[2,3,4],"data":[`)) {
				t.Errorf("%s binary=%v: JSON data present = %v, want %v", dt, bin, !wantJSON, wantJSON)
			}
			req, got, err := DecodeRequest(body, hl, "", 0)
			if err != nil {
				t.Fatalf("%s binary=%v: DecodeRequest: %v\n%s", dt, bin, err, body)
			}
			if req.ID != "rt" {
				t.Errorf("id = %q", req.ID)
			}
			assertTensors(t, got, ins)

			body, hl, err = EncodeResponse(&InferResponse{ModelName: "m"}, ins, func(string) bool { return bin })
			if err != nil {
				t.Fatalf("%s binary=%v: EncodeResponse: %v", dt, bin, err)
			}
			if wantJSON != (hl == -1) {
				t.Errorf("%s binary=%v: response headerLen = %d", dt, bin, hl)
			}
			_, got, err = DecodeResponse(body, hl)
			if err != nil {
				t.Fatalf("%s binary=%v: DecodeResponse: %v\n%s", dt, bin, err, body)
			}
			assertTensors(t, got, ins)
		}
	}
}

// A tensor JSON cannot carry exactly goes binary even when JSON was asked for, and still
// round-trips exactly.
func TestJSONFallsBackToBinary(t *testing.T) {
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	inf := binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Inf(-1)))
	badUTF8 := []byte{2, 0, 0, 0, 0xff, 0xfe}
	for _, tc := range []Tensor{
		{Name: "nan", Datatype: "FP32", Shape: []int64{1}, Data: nan},
		{Name: "inf", Datatype: "FP64", Shape: []int64{1}, Data: inf},
		{Name: "bytes", Datatype: "BYTES", Shape: []int64{1}, Data: badUTF8},
		{Name: "half", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0x00, 0x3c}},
		{Name: "bf16", Datatype: "BF16", Shape: []int64{1}, Data: []byte{0x80, 0x3f}},
	} {
		ok := Tensor{Name: "ok", Datatype: "UINT8", Shape: []int64{2}, Data: []byte{7, 8}}
		outs := []Tensor{ok, tc}
		body, hl, err := EncodeResponse(&InferResponse{ModelName: "m"}, outs, func(string) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		if hl < 0 {
			t.Fatalf("%s: went JSON: %s", tc.Name, body)
		}
		wantHeader := `{"model_name":"m","outputs":[{"name":"ok","datatype":"UINT8","shape":[2],"data":[7,8]},` +
			`{"name":"` + tc.Name + `","datatype":"` + tc.Datatype + `","shape":[1],"parameters":{"binary_data_size":` +
			string(rune('0'+len(tc.Data))) + `}}]}`
		if string(body[:hl]) != wantHeader || !bytes.Equal(body[hl:], tc.Data) {
			t.Errorf("%s: body = %q, want %q + % x", tc.Name, body, wantHeader, tc.Data)
		}
		_, got, err := DecodeResponse(body, hl)
		if err != nil {
			t.Fatal(err)
		}
		assertTensors(t, got, outs)

		// The request side falls back the same way.
		body, hl, err = EncodeRequest(&InferRequest{}, outs, false)
		if err != nil || hl < 0 {
			t.Fatalf("%s: request went JSON (hl %d, err %v)", tc.Name, hl, err)
		}
		_, got, err = DecodeRequest(body, hl, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		assertTensors(t, got, outs)
	}
}

func TestEncodeRejectsInconsistentTensors(t *testing.T) {
	for _, tc := range []Tensor{
		{Name: "short", Datatype: "FP32", Shape: []int64{2}, Data: make([]byte, 7)},
		{Name: "long", Datatype: "INT8", Shape: []int64{2}, Data: make([]byte, 3)},
		{Name: "dtype", Datatype: "FLOAT", Shape: []int64{1}, Data: make([]byte, 4)},
		{Name: "neg", Datatype: "INT8", Shape: []int64{-1}, Data: nil},
		{Name: "bytes", Datatype: "BYTES", Shape: []int64{2}, Data: []byte{1, 0, 0, 0, 'a'}},
		{Name: "bytes-past", Datatype: "BYTES", Shape: []int64{1}, Data: []byte{9, 0, 0, 0, 'a'}},
		{Name: "", Datatype: "INT8", Shape: []int64{1}, Data: []byte{1}},
	} {
		if _, _, err := EncodeResponse(&InferResponse{}, []Tensor{tc}, nil); err == nil {
			t.Errorf("EncodeResponse(%q) succeeded", tc.Name)
		}
		if _, _, err := EncodeRequest(&InferRequest{}, []Tensor{tc}, true); err == nil {
			t.Errorf("EncodeRequest(%q) succeeded", tc.Name)
		}
	}
	if _, _, err := EncodeResponse(&InferResponse{Parameters: Parameters{"f": math.NaN()}}, nil, nil); err == nil {
		t.Error("EncodeResponse with an unmarshalable parameter succeeded")
	}
}

func TestEncodeResponseParametersAndEmptyOutputs(t *testing.T) {
	body, hl, err := EncodeResponse(&InferResponse{ModelName: "m\"q", Parameters: Parameters{"a": "b"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model_name":"m\"q","parameters":{"a":"b"},"outputs":[]}`; string(body) != want || hl != -1 {
		t.Errorf("body = %s, %d; want %s, -1", body, hl, want)
	}
	resp, ts, err := DecodeResponse(body, hl)
	if err != nil || resp.ModelName != "m\"q" || resp.Parameters["a"] != "b" || len(ts) != 0 {
		t.Errorf("DecodeResponse = %+v, %v, %v", resp, ts, err)
	}
}

func TestWantsBinary(t *testing.T) {
	req := &InferRequest{
		Parameters: Parameters{"binary_data_output": true},
		Outputs: []RequestOutput{
			{Name: "a", Parameters: Parameters{"binary_data": false}},
			{Name: "b"},
		},
	}
	for name, want := range map[string]bool{"a": false, "b": true, "c": true} {
		if got := req.WantsBinary(name); got != want {
			t.Errorf("WantsBinary(%q) = %v, want %v", name, got, want)
		}
	}
	req = &InferRequest{Outputs: []RequestOutput{{Name: "a", Parameters: Parameters{"binary_data": true}}, {Name: "b"}}}
	for name, want := range map[string]bool{"a": true, "b": false, "c": false} {
		if got := req.WantsBinary(name); got != want {
			t.Errorf("WantsBinary(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestElementCount(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		n     int64
		ok    bool
	}{
		{nil, 1, true},
		{[]int64{2, 3}, 6, true},
		{[]int64{0, 1 << 62, 1 << 62}, 0, true},
		{[]int64{1 << 62, 1 << 62, 0}, 0, true},
		{[]int64{1 << 31, 1 << 31, 2}, 0, false},
		{[]int64{1 << 31, 1 << 31, 2, 0}, 0, true},
		{[]int64{3, -1}, 0, false},
		{[]int64{math.MaxInt64}, math.MaxInt64, true},
	} {
		n, err := ElementCount(tc.shape)
		if (err == nil) != tc.ok || (tc.ok && n != tc.n) {
			t.Errorf("ElementCount(%v) = %d, %v", tc.shape, n, err)
		}
	}
}
