package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/torch"
)

// wantBadInput fails unless err is a 400 whose message holds part.
func wantBadInput(t *testing.T, what string, err error, part string) {
	t.Helper()
	if err == nil || !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), part) {
		t.Errorf("%s: %v, want a 400 mentioning %q", what, err, part)
	}
}

// A JSON value the tensor's dtype cannot hold is refused, not wrapped or rounded to
// infinity on its way to the model; values it can hold arrive exactly.
func TestTensorJSONValuesOutOfRange(t *testing.T) {
	for _, c := range []struct{ dtype, data, part string }{
		{"float32", "1e300", "1e300 is out of range for float32"},
		{"float32", "-3.5e38", "out of range for float32"},
		{"float64", "1e999", "out of range for float64"},
		{"uint8", "300", "300 is out of range for uint8 [0, 255]"},
		{"uint8", "-1", "out of range for uint8"},
		{"int8", "-129", "out of range for int8"},
		{"int32", "2147483648", "out of range for int32"},
		{"int64", "2.5", "2.5 is not int64"},
		{"int64", "1e19", "is not int64"},
		{"int64", "99999999999999999999", "is not int64"},
		{"bool", "2", "out of range for bool [0, 1]"},
		{"int64", `"1"`, "want a number, got a string"},
		{"float32", `{"a": 1}`, "want a number, got an object"},
		{"float32", "null", "want a number, got null"},
	} {
		_, err := decodeJSONTensor([]byte(`{"dtype": "` + c.dtype + `", "data": [` + c.data + `]}`))
		wantBadInput(t, c.dtype+" "+c.data, err, c.part)
	}
	for _, c := range []struct {
		dtype, data string
		want        []byte
	}{
		{"int64", "9007199254740993", binary.LittleEndian.AppendUint64(nil, 9007199254740993)},
		{"int64", "-9223372036854775808", binary.LittleEndian.AppendUint64(nil, 1<<63)},
		{"int32", "2.0", binary.LittleEndian.AppendUint32(nil, 2)},
		{"int32", "1e3", binary.LittleEndian.AppendUint32(nil, 1000)},
		{"uint8", "255", []byte{255}},
		{"bool", "true", []byte{1}},
		{"float32", "3.4e38", binary.LittleEndian.AppendUint32(nil, math.Float32bits(3.4e38))},
	} {
		tn, err := decodeJSONTensor([]byte(`{"dtype": "` + c.dtype + `", "data": [` + c.data + `]}`))
		if err != nil || !bytes.Equal(tn.Data, c.want) {
			t.Errorf("%s %s: %v %x, want %x", c.dtype, c.data, err, tn.Data, c.want)
		}
	}
}

// Shapes that overflow, shapes larger than the data, deep nesting and long arrays are 400s
// that say which, and cost no allocation of the declared size.
func TestTensorHostileShapes(t *testing.T) {
	h := &TensorHandler{ins: []archive.TensorSpec{{Name: "input__0", DType: "float32", Shape: []int64{-1, 1, 28, 28}}}}
	npyHeader := func(shape string) []byte {
		hdr := "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n"
		return append(append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8)), hdr...)
	}
	for _, c := range []struct{ name, body, part string }{
		{"product overflows int64", `{"data": [1], "shape": [4294967296, 4294967296, 4294967296]}`, "too large"},
		{"dimension overflows int64", `{"data": [1], "shape": [99999999999999999999]}`, "non-negative integers"},
		{"shape larger than the data", `{"data": [1, 2, 3], "shape": [1000, 1, 28, 28]}`, "needs 784000 values, data has 3"},
		{"nested 10,000 deep", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), "deeper than 32"},
		{"nested 100,000 deep", strings.Repeat("[", 100000) + strings.Repeat("]", 100000), "exceeded max depth"},
		{"a million values for 784", "[" + strings.Repeat("0,", 1<<20) + "0]", "must have shape"},
		{"npy shape overflows", string(npyHeader("(4294967296, 4294967296, 4294967296)")), "too large"},
		{"npy shape larger than the data", string(append(npyHeader("(1000, 1, 28, 28)"), make([]byte, 3136)...)), "needs 3136000 data bytes, got 3136"},
		{"npy header length past the data", "\x93NUMPY\x01\x00\xff\xff{}", "header length 65535 exceeds the data"},
		{"npy 2.0 header length past the data", "\x93NUMPY\x02\x00\xff\xff\xff\xff{}", "header length 4294967295 exceeds the data"},
	} {
		_, err := h.Preprocess(&Request{Inputs: []Payload{{Name: "body", Data: []byte(c.body)}}, Header: func(string) string { return "" }})
		wantBadInput(t, c.name, err, c.part)
	}
}

// A NaN or an infinity in the output has no JSON number: the answer is .npy, which
// carries it, rather than a body no JSON parser reads.
func TestTensorNonFiniteOutputIsNpy(t *testing.T) {
	h := &TensorHandler{}
	data := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(math.Inf(1))))
	resp, err := h.Postprocess(&Sample{Items: 1, State: tensorState{}}, []Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(resp.Body)
	if resp.ContentType != "application/x-npy" || err != nil || !bytes.Equal(a.Data, data) {
		t.Fatalf("%s %q (%v), want the NaN and +Inf as .npy", resp.ContentType, resp.Body, err)
	}
	finite := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5))
	resp, err = h.Postprocess(&Sample{Items: 1, State: tensorState{}}, []Tensor{{DType: torch.Float32, Shape: []int64{1, 1}, Data: finite}})
	if err != nil || resp.ContentType != "application/json" || !json.Valid(resp.Body) {
		t.Fatalf("finite output: %v %s %s", err, resp.ContentType, resp.Body)
	}
}

// A request of many tiny images is a decompression bomb of its own (70 bytes each, 600 KB
// each once decoded for ResNet): past max_images it is refused before any is decoded.
func TestImageRequestLimit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "models", "configs", "digits.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := archive.ParseModelConfig(archive.ConfigTOML, b)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1)))
	tiny := base64.StdEncoding.EncodeToString(buf.Bytes())
	list := func(n int) *Request {
		body, _ := json.Marshal(slicesRepeat(tiny, n))
		return &Request{Inputs: []Payload{{Name: "body", ContentType: "application/json", Data: body}}, Header: func(string) string { return "" }}
	}
	for _, c := range []struct {
		name      string
		maxImages any // nil: the default
		ok, bad   int
	}{{"default", nil, defaultMaxImages, defaultMaxImages + 1}, {"max_images 2", int64(2), 2, 3}} {
		cfg.Options = map[string]any{}
		for k, v := range map[string]any{"color": "gray", "width": int64(28), "height": int64(28), "mean": []any{0.5}, "std": []any{0.5}} {
			cfg.Options[k] = v
		}
		if c.maxImages != nil {
			cfg.Options["max_images"] = c.maxImages
		}
		h, err := New("image_classifier", Context{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if s, err := h.Preprocess(list(c.ok)); err != nil || s.Items != c.ok {
			t.Fatalf("%s: %d images: %v", c.name, c.ok, err)
		}
		_, err = h.Preprocess(list(c.bad))
		wantBadInput(t, c.name, err, "at most")
	}
	cfg.Options["max_images"] = int64(0)
	if _, err := New("image_classifier", Context{Config: cfg}); err == nil || !strings.Contains(err.Error(), "max_images") {
		t.Fatalf("max_images 0: %v", err)
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Ids sent as tensors (the Open Inference Protocol skips Preprocess) are checked against the
// vocabulary and max_length: out of range, the model's embedding fails, which would be a 500
// for the client's mistake.
func TestTextClassifierChecksTensorIDs(t *testing.T) {
	tc := newTestTextClassifier(t, nil)
	m := loadTextModel(t)
	sample := func(ids ...int64) *Sample {
		n := int64(len(ids))
		idb, mask := make([]byte, 0, 8*n), make([]byte, 0, 8*n)
		for _, id := range ids {
			idb = binary.LittleEndian.AppendUint64(idb, uint64(id))
			mask = binary.LittleEndian.AppendUint64(mask, 1)
		}
		return &Sample{Items: 1, Tensors: []Tensor{{DType: torch.Int64, Shape: []int64{1, n}, Data: idb}, {DType: torch.Int64, Shape: []int64{1, n}, Data: mask}}}
	}
	_, err := tc.Infer(m, []*Sample{sample(2, 1_000_000, 3)})
	wantBadInput(t, "id past the vocabulary", err, "id 1000000 at position 1 is outside the vocabulary")
	_, err = tc.Infer(m, []*Sample{sample(2, -1, 3)})
	wantBadInput(t, "negative id", err, "id -1 at position 1 is outside the vocabulary")
	long := make([]int64, 65)
	_, err = tc.Infer(m, []*Sample{sample(long...)})
	wantBadInput(t, "65 ids", err, "65 ids exceed the maximum length of 64")
	if _, err := tc.Infer(m, []*Sample{sample(2, 3)}); err != nil {
		t.Fatalf("[CLS] [SEP]: %v", err)
	}
}

// A JSON list for the text and image handlers is decoded item by item: a huge list of the
// wrong kind is refused at its first item, and a broken list is still invalid JSON.
func TestJSONListsItemByItem(t *testing.T) {
	huge := []byte(repeatNumbers(3_000_000))
	_, err := jsonTexts(huge)
	wantBadInput(t, "3 M numbers as texts", err, "must hold strings")
	_, err = jsonImages(huge)
	wantBadInput(t, "3 M numbers as images", err, "must hold base64 strings")
	for _, c := range []struct{ body, part string }{
		{`[`, "unexpected end of JSON input"},
		{`["a",`, "unexpected end of JSON input"},
		{`["a"] x`, "data after the list"},
		{`["a" "b"]`, "invalid JSON body"},
		{`["a", ["b", ["c"]]]`, "nests too deep"},
	} {
		_, err := jsonTexts([]byte(c.body))
		wantBadInput(t, c.body, err, c.part)
	}
	if texts, err := jsonTexts([]byte(` [ "a", ["b"], {"text": "c"} ] `)); err != nil || strings.Join(texts, ",") != "a,b,c" {
		t.Fatalf("texts %q, %v", texts, err)
	}
}

func repeatNumbers(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]"
}
