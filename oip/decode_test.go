package oip

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// jsonInput is a request body with one JSON input.
func jsonInput(datatype, shape, data string) []byte {
	return []byte(`{"inputs":[{"name":"x","datatype":"` + datatype + `","shape":` + shape + `,"data":` + data + `}]}`)
}

func decodeOne(t *testing.T, body []byte) ([]byte, error) {
	t.Helper()
	_, ts, err := DecodeRequest(body, -1, "", 0)
	if err != nil {
		return nil, err
	}
	return ts[0].Data, nil
}

func TestJSONDataConversion(t *testing.T) {
	for _, tc := range []struct {
		datatype, shape, data string
		want                  []byte
	}{
		{"INT32", "[2,2]", "[1,2,3,4]", []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}},
		{"INT32", "[2,2]", "[[1,2],[3,4]]", []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}},
		{"INT32", "[2,2]", " [ [ 1 , 2 ] ,\n[3,4] ] ", []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}},
		{"INT8", "[1,2,1]", "[[[1],[-1]]]", []byte{1, 0xff}},
		{"INT8", "[]", "[-128]", []byte{0x80}},
		{"INT8", "[0]", "[]", []byte{}},
		{"INT8", "[2,0]", "[[],[]]", []byte{}},
		{"INT32", "[2]", "[2.0, 1e2]", []byte{2, 0, 0, 0, 100, 0, 0, 0}},
		{"INT16", "[2]", "[-32768, 32767]", []byte{0x00, 0x80, 0xff, 0x7f}},
		{"UINT16", "[2]", "[65535, -0]", []byte{0xff, 0xff, 0, 0}},
		{"UINT8", "[3]", "[0, 255, 2.55e2]", []byte{0, 255, 255}},
		{"INT64", "[2]", "[9223372036854775807, -9223372036854775808]",
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0x80}},
		{"INT64", "[1]", "[9007199254740993]", []byte{1, 0, 0, 0, 0, 0, 0x20, 0}}, // 2^53+1, not a float64
		{"UINT64", "[1]", "[18446744073709551615]", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"UINT64", "[1]", "[1e19]", []byte{0x00, 0x00, 0xe8, 0x89, 0x04, 0x23, 0xc7, 0x8a}},
		{"BOOL", "[3]", "[true,false,true]", []byte{1, 0, 1}},
		{"BOOL", "[2,1]", "[[true],[false]]", []byte{1, 0}},
		{"FP32", "[3]", "[1, -2.5, 0.1]", []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0, 0xcd, 0xcc, 0xcc, 0x3d}},
		{"FP64", "[1]", "[1]", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}},
		{"BYTES", "[3]", `["ab","","\u00e9\n"]`, []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 3, 0, 0, 0, 0xc3, 0xa9, '\n'}},
		{"BYTES", "[1,2]", `[["ab","c"]]`, bytesABC},
	} {
		got, err := decodeOne(t, jsonInput(tc.datatype, tc.shape, tc.data))
		if err != nil {
			t.Errorf("%s %s %s: %v", tc.datatype, tc.shape, tc.data, err)
			continue
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s %s %s = % x, want % x", tc.datatype, tc.shape, tc.data, got, tc.want)
		}
	}
}

// badRequest checks that err wraps ErrBadRequest and its message says what was wrong.
func badRequest(t *testing.T, what string, err error, wantMsg string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one containing %q", what, wantMsg)
		return
	}
	if !errors.Is(err, ErrBadRequest) {
		t.Errorf("%s: error %q does not wrap ErrBadRequest", what, err)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("%s: error %q does not contain %q", what, err, wantMsg)
	}
}

func TestJSONDataErrors(t *testing.T) {
	for _, tc := range []struct{ datatype, shape, data, msg string }{
		{"INT32", "[2,2]", "[[1,2],[3]]", "ragged"},
		{"INT32", "[2,2]", "[[1,2],3]", "ragged"},
		{"INT32", "[2,2]", "[1,[2,3],4]", "ragged"},
		{"INT32", "[2,2]", "[[1,2],[[3],4]]", "ragged"},
		{"INT32", "[2,2]", "[[[1,2]],[[3,4]]]", "nested deeper"},
		{"INT32", "[2,2]", "[[],[1,2]]", "ragged"},
		{"INT32", "[4]", "[[1,2],[3,4]]", "nested deeper"},
		{"INT32", "[1,4]", "[[1,2],[3,4]]", "nested as [2 2] but the shape is [1 4]"},
		{"INT32", "[2,2]", "[1,2,3]", "data has 3 elements but shape [2 2] needs 4"},
		{"INT32", "[2,2]", "[1,2,3,4,5]", "more than the shape's 4 elements"},
		{"INT32", "[2,2]", "[]", "shape [2 2] needs 4 elements"},
		{"INT32", "[2,2]", "[1, 2, 3 ]", "data has 3 elements"},
		{"INT32", "[1]", "5", "must be an array"},
		{"INT32", "[1]", `{"a":1}`, "must be an array"},
		{"INT32", "[1]", `[{"a":1}]`, "element 0: an object"},
		{"UINT8", "[1]", "[300]", "300 as UINT8: out of range"},
		{"UINT8", "[1]", "[-1]", "out of range"},
		{"UINT8", "[1]", "[2.56e2]", "out of range"},
		{"INT8", "[1]", "[128]", "out of range"},
		{"INT8", "[1]", "[-129]", "out of range"},
		{"INT32", "[1]", "[1.5]", "1.5 as INT32: not an integer"},
		{"INT32", "[1]", "[2147483648]", "out of range"},
		{"INT64", "[1]", "[9223372036854775808]", "out of range"},
		{"INT64", "[1]", "[1e19]", "out of range"},
		{"UINT64", "[1]", "[18446744073709551616]", "out of range"},
		{"UINT64", "[1]", "[1.8446744073709552e19]", "out of range"},
		{"INT32", "[1]", "[true]", "INT32 data must be numbers, got true"},
		{"INT32", "[1]", `["1"]`, "must be numbers"},
		{"INT32", "[1]", "[null]", "must be numbers"},
		{"FP32", "[1]", "[1e39]", "as FP32: out of range"},
		{"FP64", "[1]", "[1e309]", "as FP64: out of range"},
		{"FP32", "[1]", "[false]", "must be numbers"},
		{"BOOL", "[1]", "[1]", "BOOL data must be true or false, got 1"},
		{"BOOL", "[1]", `["true"]`, "must be true or false"},
		{"BYTES", "[1]", "[1]", "BYTES data must be strings"},
		{"FP16", "[1]", "[1.0]", "FP16 cannot be JSON data"},
		{"BF16", "[1]", "[1.0]", "BF16 cannot be JSON data"},
	} {
		_, err := decodeOne(t, jsonInput(tc.datatype, tc.shape, tc.data))
		badRequest(t, tc.datatype+" "+tc.shape+" "+tc.data, err, tc.msg)
	}
}

func TestMalformedRequests(t *testing.T) {
	bin := func(header string, data ...byte) ([]byte, int) {
		return slices.Concat([]byte(header), data), len(header)
	}
	type tc struct {
		name string
		body []byte
		hl   int
		msg  string
	}
	cases := []tc{
		{"bad JSON", []byte(`{"inputs":[`), -1, "invalid JSON in request header"},
		{"not an object", []byte(`[1]`), -1, "invalid JSON"},
		{"JSON trailing garbage", []byte(`{"inputs":[]} x`), -1, "invalid JSON"},
		{"empty body", nil, -1, "invalid JSON"},
		{"wrong field type", []byte(`{"id":5,"inputs":[]}`), -1, "invalid JSON"},
		{"missing inputs", []byte(`{"id":"a"}`), -1, "request has no inputs"},
		{"empty inputs", []byte(`{"inputs":[]}`), -1, "request has no inputs"},
		{"unknown datatype", jsonInput("FP8", "[1]", "[1]"), -1, `unknown datatype "FP8"`},
		{"lower-case datatype", jsonInput("fp32", "[1]", "[1]"), -1, `unknown datatype "fp32"`},
		{"no datatype", []byte(`{"inputs":[{"name":"x","shape":[1],"data":[1]}]}`), -1, `input "x" has no datatype`},
		{"no shape", []byte(`{"inputs":[{"name":"x","datatype":"INT8","data":[1]}]}`), -1, `input "x" has no shape`},
		{"no name", []byte(`{"inputs":[{"datatype":"INT8","shape":[1],"data":[1]}]}`), -1, "input 0 has no name"},
		{"no data", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1]}]}`), -1, "neither data nor binary_data_size"},
		{"null data", jsonInput("INT8", "[1]", "null"), -1, "neither data nor"},
		{"negative shape", jsonInput("INT8", "[2,-1]", "[1]"), -1, "negative dimension -1"},
		{"overflowing shape", jsonInput("INT8", "[4294967296,4294967296]", "[1]"), -1, "too many elements"},
		{"overflowing byte size", []byte(`{"inputs":[{"name":"x","datatype":"FP64","shape":[2305843009213693952,2],"parameters":{"binary_data_size":8}}]}`), -1, "too large"},
		{"shape larger than data", jsonInput("INT8", "[1000000000000]", "[1]"), -1, "cannot hold"},
		{"duplicate input names", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]},{"name":"x","datatype":"INT8","shape":[1],"data":[2]}]}`), -1, `duplicate input name "x"`},
		{"duplicate outputs", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"y"},{"name":"y"}]}`), -1, `output "y" requested twice`},
		{"nameless output", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{}]}`), -1, "requested output has no name"},
		{"binary_data not bool", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"y","parameters":{"binary_data":1}}]}`), -1, "binary_data must be a bool"},
		{"binary_data_output not bool", []byte(`{"parameters":{"binary_data_output":"yes"},"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}]}`), -1, "binary_data_output must be a bool"},
		{"FP16 as JSON", jsonInput("FP16", "[1]", "[1]"), -1, "FP16 cannot be JSON data"},
		{"negative header length", jsonInput("INT8", "[1]", "[1]"), -2, "negative"},
		{"array header", []byte(`[1]`), -1, "the header must be an object, got an array"},
		{"string shape", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":["1"],"data":[1]}]}`), -1, `field "inputs.shape" must be an integer (int64), got a string`},
		{"fractional shape", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1.5],"data":[1]}]}`), -1, "got 1.5"},
		{"nested 10,000 deep", []byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000)), -1, "must be an object, got an array"},
		{"nested 100,000 deep", []byte(strings.Repeat("[", 100000) + strings.Repeat("]", 100000)), -1, "exceeded max depth"},
		{"invalid UTF-8 in a name", []byte("{\"inputs\":[{\"name\":\"x\xff\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[1]}]}"), -1, "not valid UTF-8"},
		{"invalid UTF-8 in BYTES data", []byte("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"caf\xe9\"]}]}"), -1, "not valid UTF-8"},
	}
	b, h := bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[4],"parameters":{"binary_data_size":4}}]}`, 1, 2, 3)
	cases = append(cases, tc{"binary_data_size beyond the body", b, h, "binary_data_size is 4 but only 3 bytes of binary data remain"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}}]}`, 1, 2, 3)
	cases = append(cases, tc{"trailing bytes", b, h, "1 trailing bytes"})
	b, _ = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}}]}`, 1, 2)
	cases = append(cases, tc{"header length larger than the body", b, len(b) + 1, "but the body has only"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[2],"parameters":{"binary_data_size":2}}]}`, 1, 2)
	cases = append(cases, tc{"header length cuts the JSON", b, h - 1, "invalid JSON"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":4}}]}`, 1, 2, 3, 4)
	cases = append(cases, tc{"binary size disagrees with shape", b, h, "shape [2] of FP32 needs 8 bytes, but binary_data_size is 4"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1.5}}]}`, 1, 2)
	cases = append(cases, tc{"fractional binary_data_size", b, h, "must be a non-negative integer"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":-1}}]}`, 1)
	cases = append(cases, tc{"negative binary_data_size", b, h, "must be a non-negative integer"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":"1"}}]}`, 1)
	cases = append(cases, tc{"string binary_data_size", b, h, "must be a non-negative integer"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1e300}}]}`, 1)
	cases = append(cases, tc{"huge binary_data_size", b, h, "only 1 bytes"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1],"parameters":{"binary_data_size":1}}]}`, 1)
	cases = append(cases, tc{"data and binary_data_size", b, h, "both JSON data and binary_data_size"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":5}}]}`, 9, 0, 0, 0, 'a')
	cases = append(cases, tc{"BYTES length past the data", b, h, "length 9 runs past the data"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":5}}]}`, 1, 0, 0, 0, 'a')
	cases = append(cases, tc{"BYTES too few elements", b, h, "cannot hold 2 elements"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":6}}]}`, 1, 0, 0, 0, 'a', 'b')
	cases = append(cases, tc{"BYTES bytes left over", b, h, "1 bytes left after 1 elements"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"BOOL","shape":[2],"parameters":{"binary_data_size":2}}]}`, 1, 2)
	cases = append(cases, tc{"BOOL byte not 0 or 1", b, h, "BOOL element 1 is 2"})
	b, h = bin(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1}}]}`, 1)
	cases = append(cases, tc{"binary data without header length", b, -1, "invalid JSON"})

	for _, c := range cases {
		_, _, err := DecodeRequest(c.body, c.hl, "", 0)
		badRequest(t, c.name, err, c.msg)
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zlibbed(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func flated(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCompressedRequests(t *testing.T) {
	plain := layoutRequestBody()
	want := []Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: fp32x4},
		{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: bytesABC},
	}
	for _, tc := range []struct {
		enc  string
		body []byte
	}{
		{"gzip", gzipped(t, plain)},
		{"GZip", gzipped(t, plain)},
		{"deflate", zlibbed(t, plain)},
		{"deflate", flated(t, plain)}, // bare deflate, as some clients send
		{"identity", plain},
	} {
		_, ts, err := DecodeRequest(tc.body, len(layoutRequestHeader), tc.enc, 1<<20)
		if err != nil {
			t.Errorf("%s: %v", tc.enc, err)
			continue
		}
		assertTensors(t, ts, want)
	}

	j := jsonInput("INT32", "[2,2]", "[[1,2],[3,4]]")
	_, ts, err := DecodeRequest(gzipped(t, j), -1, "gzip", 0)
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, ts, []Tensor{{Name: "x", Datatype: "INT32", Shape: []int64{2, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}}})

	// The body limit applies to the decompressed size, so it is exactly met here.
	if _, _, err := DecodeRequest(gzipped(t, j), -1, "gzip", len(j)); err != nil {
		t.Errorf("body of exactly maxBody: %v", err)
	}
	_, _, err = DecodeRequest(gzipped(t, j), -1, "gzip", len(j)-1)
	badRequest(t, "one byte over maxBody", err, "exceeds the limit")

	_, _, err = DecodeRequest([]byte("not gzip"), -1, "gzip", 0)
	badRequest(t, "bad gzip", err, "gzip body")
	_, _, err = DecodeRequest(gzipped(t, j)[:20], -1, "gzip", 0)
	badRequest(t, "truncated gzip", err, "gzip")
	_, _, err = DecodeRequest([]byte("\xff\xff not deflate"), -1, "deflate", 0)
	badRequest(t, "bad deflate", err, "deflate body")
	_, _, err = DecodeRequest(j, -1, "br", 0)
	badRequest(t, "unsupported encoding", err, `unsupported Content-Encoding "br"`)
	_, _, err = DecodeRequest(j, -1, "", len(j)-1)
	badRequest(t, "uncompressed body over maxBody", err, "exceeds the limit")
	if !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("%v does not wrap ErrBodyTooLarge", err)
	}
}

// A small compressed body that expands past maxBody is refused once maxBody bytes are out,
// without inflating the rest: the allocations stay near maxBody, far below the 64 MiB inside.
func TestDecompressionBomb(t *testing.T) {
	bomb := make([]byte, 64<<20)
	for _, tc := range []struct {
		enc  string
		body []byte
	}{
		{"gzip", gzipped(t, bomb)},
		{"deflate", zlibbed(t, bomb)},
	} {
		if len(tc.body) > 1<<20 {
			t.Fatalf("%s bomb is %d bytes; expected it to compress well", tc.enc, len(tc.body))
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := DecodeRequest(tc.body, -1, tc.enc, 1<<20)
		runtime.ReadMemStats(&after)
		badRequest(t, tc.enc+" bomb", err, "decompressed body exceeds the limit of 1048576 bytes")
		if !errors.Is(err, ErrBodyTooLarge) {
			t.Errorf("%v does not wrap ErrBodyTooLarge", err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Errorf("%s bomb: decoding allocated %d bytes with maxBody 1 MiB", tc.enc, alloc)
		}
	}
}

func TestRawRequest(t *testing.T) {
	if !IsRaw(0) || IsRaw(-1) || IsRaw(10) {
		t.Error("IsRaw is wrong")
	}
	_, _, err := DecodeRequest(fp32x4, 0, "", 0)
	if !errors.Is(err, ErrRawRequest) || errors.Is(err, ErrBadRequest) {
		t.Errorf("DecodeRequest with header length 0: %v, want ErrRawRequest (not a bad request)", err)
	}

	req, ts, err := DecodeRawRequest(fp32x4, "", 0, MetadataTensor{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{-1, 2, 2}}, true)
	if err != nil {
		t.Fatal(err)
	}
	assertTensors(t, ts, []Tensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 2, 2}, Data: fp32x4}})
	if &ts[0].Data[0] != &fp32x4[0] {
		t.Error("raw data was copied")
	}
	if len(req.Inputs) != 1 || req.Inputs[0].Name != "INPUT__0" || !slices.Equal(req.Inputs[0].Shape, []int64{1, 2, 2}) || !req.WantsBinary("anything") {
		t.Errorf("request = %+v; want one input and every output binary", req)
	}

	// One variable dimension besides the batch one is deduced from the size.
	_, ts, err = DecodeRawRequest(fp32x4, "", 0, MetadataTensor{Name: "x", Datatype: "FP32", Shape: []int64{-1, -1, 2}}, true)
	if err != nil || !slices.Equal(ts[0].Shape, []int64{1, 2, 2}) {
		t.Errorf("deduced shape: %v, %v", ts, err)
	}
	_, ts, err = DecodeRawRequest(gzipped(t, fp32x4), "gzip", 0, MetadataTensor{Name: "x", Datatype: "INT16", Shape: []int64{-1}}, false)
	if err != nil || !slices.Equal(ts[0].Shape, []int64{8}) || !bytes.Equal(ts[0].Data, fp32x4) {
		t.Errorf("gzip raw: %v, %v", ts, err)
	}
	// BYTES: the body is the one element.
	_, ts, err = DecodeRawRequest([]byte("hello"), "", 0, MetadataTensor{Name: "s", Datatype: "BYTES", Shape: []int64{-1, 1}}, true)
	if err != nil || !bytes.Equal(ts[0].Data, []byte{5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'}) || !slices.Equal(ts[0].Shape, []int64{1, 1}) {
		t.Errorf("BYTES raw: %v, %v", ts, err)
	}

	for _, tc := range []struct {
		name  string
		body  []byte
		input MetadataTensor
		msg   string
	}{
		{"wrong size", fp32x4[:12], MetadataTensor{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}, "needs 16 bytes, got 12"},
		{"not whole elements", fp32x4[:10], MetadataTensor{Name: "x", Datatype: "FP32", Shape: []int64{-1, -1}}, "not a whole number"},
		{"two variable dimensions", fp32x4, MetadataTensor{Name: "x", Datatype: "FP32", Shape: []int64{-1, -1, -1}}, "more than one variable dimension"},
		{"BYTES not one element", []byte("a"), MetadataTensor{Name: "x", Datatype: "BYTES", Shape: []int64{-1, 2}}, "must have shape [1]"},
		{"BOOL not 0 or 1", []byte{0, 3}, MetadataTensor{Name: "x", Datatype: "BOOL", Shape: []int64{-1, 2}}, "BOOL element 1 is 3"},
		{"zero dimension", nil, MetadataTensor{Name: "x", Datatype: "FP32", Shape: []int64{-1, 0, -1}}, "zero dimension"},
	} {
		_, _, err := DecodeRawRequest(tc.body, "", 0, tc.input, true)
		badRequest(t, "raw: "+tc.name, err, tc.msg)
	}
	if _, _, err := DecodeRawRequest(fp32x4, "", 0, MetadataTensor{Name: "x", Datatype: "F32", Shape: []int64{4}}, false); err == nil || errors.Is(err, ErrBadRequest) {
		t.Errorf("unknown model datatype: %v; want an error that is not the client's", err)
	}
}

func TestMalformedResponses(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		hl   int
		msg  string
	}{
		{"bad JSON", `{"outputs":`, -1, "invalid JSON in response header"},
		{"header length 0", `{}`, 0, "is 0"},
		{"header past body", `{}`, 3, "only 2 bytes"},
		{"unknown datatype", `{"outputs":[{"name":"y","datatype":"X","shape":[1],"data":[1]}]}`, -1, "unknown datatype"},
		{"binary past body", `{"outputs":[{"name":"y","datatype":"INT8","shape":[1],"parameters":{"binary_data_size":1}}]}`, -1, "only 0 bytes"},
		{"duplicate outputs", `{"outputs":[{"name":"y","datatype":"INT8","shape":[1],"data":[1]},{"name":"y","datatype":"INT8","shape":[1],"data":[1]}]}`, -1, "duplicate output name"},
	} {
		_, _, err := DecodeResponse([]byte(tc.body), tc.hl)
		if err == nil || !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrBadResponse containing %q", tc.name, err, tc.msg)
		}
	}
}
