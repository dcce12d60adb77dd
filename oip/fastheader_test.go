package oip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// Headers the fast path takes: those of ab's bench bodies, tritonclient's, nested data.
var fastHeaders = []string{
	`{"inputs": [{"name": "input.1", "shape": [1, 1, 2, 2], "datatype": "FP32", "data": [0.1257, -0.1321, 0.6404, 1e-3]}]}`,
	`{"inputs":[{"name":"input_ids","shape":[1,3],"datatype":"INT64","data":[1001,9223372036854775807,-9223372036854775808]},` +
		`{"name":"attention_mask","shape":[1,3],"datatype":"INT64","data":[1,1,1]}]}`,
	`{"id":"r-1","parameters":{"binary_data_output":false},"inputs":[{"name":"x","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]}],` +
		`"outputs":[{"name":"y","parameters":{"binary_data":false}}]}`,
	` { "inputs" : [ { "data" : [ true , false ] , "datatype" : "BOOL" , "shape" : [ 2 ] , "name" : "b" } ] } ` + "\n",
	`{"inputs":[{"name":"x","shape":[],"datatype":"FP64","data":[-0.0]}]}`,
	`{"inputs":[{"name":"x","shape":[3],"datatype":"UINT8","data":[0,255,2.0E+0]}]}`,
}

// Each goes the fast way, and decodes to what encoding/json's way gives.
func TestFastHeaderSameAsSlow(t *testing.T) {
	for _, h := range fastHeaders {
		id, params, inputs, outputs, ok := fastHeader([]byte(h))
		if !ok {
			t.Errorf("fastHeader refused %s", h)
			continue
		}
		req, ts, err := requestOf(id, params, inputs, outputs, nil, true)
		if err != nil {
			t.Errorf("%s: fast path: %v", h, err)
			continue
		}
		sreq, sts, err := slowRequest([]byte(h), nil)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if !reflect.DeepEqual(req, sreq) || !reflect.DeepEqual(ts, sts) {
			t.Errorf("%s:\nfast %+v %+v\nslow %+v %+v", h, req, ts, sreq, sts)
		}
	}
}

// Headers the fast path passes to encoding/json, valid or not, and the errors that must stay
// encoding/json's: a number JSON does not allow but strconv parses is still invalid JSON.
func TestFastHeaderFallsBack(t *testing.T) {
	refused := []string{
		`{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["a"]}]}`,    // strings in data
		`{"inputs":[{"name":"x\u0041","shape":[1],"datatype":"FP32","data":[1]}]}`, // an escape
		`{"inputs":[{"name":"é","shape":[1],"datatype":"FP32","data":[1]}]}`,       // not ASCII
		`{"Inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`,       // a key in another case
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"inputs":[]}`,
		`{"inputs":[{"name":"x","shape":[1.0],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"x","shape":[01],"datatype":"FP32","data":[1]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[null]}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"parameters":null}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"extra":1}]}`,
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]} x`,
	}
	for _, h := range refused {
		if _, _, _, _, ok := fastHeader([]byte(h)); ok {
			t.Errorf("fastHeader took %s", h)
		}
	}
	for _, num := range []string{"01", "1.", "-.5", "1e", "1e+", "-", "--1", "1.5.5", "0x1p3", "+1", "1e5e5"} {
		h := []byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[` + num + `]}]}`)
		_, _, err := DecodeRequest(h, -1, "", 0)
		_, _, want := slowRequest(h, nil)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("data [%s]: error %v, encoding/json's way says %v", num, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "invalid JSON") && !strings.Contains(err.Error(), "must be numbers") {
			t.Errorf("data [%s]: %v", num, err)
		}
	}
}

// FuzzFastHeader checks that whatever the fast path accepts, encoding/json's way accepts too
// and decodes to the same request and tensors.
func FuzzFastHeader(f *testing.F) {
	for _, h := range fastHeaders {
		f.Add([]byte(h))
	}
	f.Add(jsonInput("INT32", "[2,2]", "[[1,2],[3,4]]"))
	f.Add(jsonInput("FP32", "[2]", "[1.5e3, -0]"))
	f.Fuzz(func(t *testing.T, header []byte) {
		id, params, inputs, outputs, ok := fastHeader(header)
		if !ok {
			return
		}
		req, ts, err := requestOf(id, params, inputs, outputs, nil, true)
		if err != nil {
			return // DecodeRequest decodes it again the slow way
		}
		sreq, sts, err := slowRequest(header, nil)
		if err != nil {
			t.Fatalf("fast path took %q, which encoding/json's way refuses: %v", header, err)
		}
		if !reflect.DeepEqual(req, sreq) || !reflect.DeepEqual(ts, sts) {
			t.Fatalf("%q:\nfast %+v %+v\nslow %+v %+v", header, req, ts, sreq, sts)
		}
	})
}

// mnistBody is as bench/onnx.sh's MNIST request: 784 FP32 numbers, as JSON.
func mnistBody() []byte {
	var b strings.Builder
	b.WriteString(`{"inputs": [{"name": "input.1", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [`)
	for i := range 784 {
		if i > 0 {
			b.WriteString(", ")
		}
		// numpy's float32s, rounded to 4 decimals, as Python's float64 repr prints them.
		b.WriteString(strconv.FormatFloat(float64([]float32{-0.1321, 0.6404, 0.1049, -0.5357, 1.3616, -0.9512}[i%6]), 'g', -1, 64))
	}
	b.WriteString("]}]}")
	return []byte(b.String())
}

// BenchmarkDecodeRequestMNIST: the MNIST body, the fast way (as served) and encoding/json's.
func BenchmarkDecodeRequestMNIST(b *testing.B) {
	body := mnistBody()
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DecodeRequest(body, -1, "", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := slowRequest(body, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// float32At gives strconv.ParseFloat's float32, bit for bit, for every number it takes.
func TestFloat32At(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	took := 0
	for range 300000 {
		var s string
		switch rng.IntN(6) {
		case 3: // Python's float64 repr of a float32, as bench/onnx.sh's body has
			s = strconv.FormatFloat(float64(float32(rng.NormFloat64())), 'g', -1, 64)
		case 4: // 17 digits near a halfway point between two float32s
			a := float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
			mid := (float64(a) + float64(math.Nextafter32(a, float32(math.Inf(1))))) / 2
			s = strconv.FormatFloat(mid, 'e', 16, 64)
			if rng.IntN(2) == 0 {
				s = strconv.FormatFloat(math.Nextafter(mid, math.Inf(rng.IntN(2)*2-1)), 'e', 16, 64)
			}
		case 5: // up to 19 digits
			s = fmt.Sprintf("%d.%de%d", rng.Uint64N(1e9), rng.Uint64N(1e10), rng.IntN(44)-22)
		case 0: // as numpy's round(4).tolist() prints
			s = strconv.FormatFloat(math.Round(rng.NormFloat64()*1e4)/1e4, 'f', -1, 64)
		case 1: // as float32s print
			s = strconv.FormatFloat(float64(float32(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(24)-12)))), 'g', -1, 32)
		default:
			s = fmt.Sprintf("%s%d.%0*de%d", []string{"", "-"}[rng.IntN(2)], rng.IntN(1000), rng.IntN(6), rng.IntN(100000), rng.IntN(30)-15)
		}
		checkFloat32At(t, s)
		if _, _, ok := float32At([]byte(s+","), 0); ok {
			took++
		}
	}
	for _, s := range []string{"0", "-0", "-0.0", "0.0000001", "9999999", "9999999e10", "1e-10", "8388609", "16777217e-1", "3.4028235e38", "1.4e-45", "1.0000000596046448", "1.0000000596046449", "0.6403999924659729",
		"9999999999999999999e22", "1e-22", "-1.7014118346046923e38", "1.1754943508222875e-38"} {
		checkFloat32At(t, s)
	}
	if took < 50000 {
		t.Errorf("float32At took %d of 300000 numbers", took)
	}
}

func checkFloat32At(t *testing.T, s string) {
	t.Helper()
	f, end, ok := float32At([]byte(s+"]"), 0)
	if !ok {
		return
	}
	want, err := strconv.ParseFloat(s, 32)
	if err != nil || !jsonNumber([]byte(s)) {
		t.Fatalf("float32At took %q, which is not a JSON number that ParseFloat parses (%v)", s, err)
	}
	if end != len(s) || math.Float32bits(f) != math.Float32bits(float32(want)) {
		t.Fatalf("float32At(%q) = %v (%#x) up to %d, ParseFloat: %v (%#x)", s, f, math.Float32bits(f), end, float32(want), math.Float32bits(float32(want)))
	}
}

func FuzzFloat32At(f *testing.F) {
	for _, s := range []string{"-0.1321", "1e-3", "0.05", "1234567", "00", "1.", "-.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsAny(s, ",] \t\n\r") {
			return
		}
		checkFloat32At(t, s)
	})
}

// eightDigits takes exactly eight ASCII digits, and reads them as strconv does.
func TestEightDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		s := fmt.Sprintf("%08d", rng.IntN(100000000))
		b := []byte(s)
		if rng.IntN(4) == 0 { // one byte off the digits, or just past them
			b[rng.IntN(8)] = []byte("/:.-e \x00\xb0")[rng.IntN(8)]
		}
		want, err := strconv.ParseUint(string(b), 10, 64)
		got, ok := eightDigits(b)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("eightDigits(%q) = %d, %v; strconv: %d, %v", b, got, ok, want, err)
		}
	}
}
