package libtorch_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/oip"
)

// The hostile-input tests send what a careless or malicious client might, and check three
// things each time: the answer is a 4xx with a message that says what was wrong, the process
// is still up, and good requests sent at the same time, to the same models and often in the
// same batches, get their right answers. docs/guide/reliability.md tabulates what they observe.

// hostileModels are the models TestHostileInput serves, each with batching on.
var hostileModels = []string{"digits", "digits_tensor", "resnet18", "textcls", "captioner"}

// goodRequest is a request whose right answer is known: key reduces a response to what must
// not change (a top-1 class, a caption), or values to its output tensor, which must stay
// within tolerance.Kernels of the answer alone (in a batch, other kernels run).
type goodRequest struct {
	name, path, contentType string
	header                  map[string]string
	body                    []byte
	key                     func(response) string
	values                  func(response) ([]float32, error)
	want                    string
	wantValues              []float32
}

func (g *goodRequest) send(s *server) (response, error) {
	var h []string
	for k, v := range g.header {
		h = append(h, k, v)
	}
	return s.post(g.path, g.contentType, g.body, h...), nil
}

// check sends g and says what is wrong with the answer, or "".
func (g *goodRequest) check(s *server) string {
	r, err := g.send(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", g.name, err)
	case r.status != 200:
		return fmt.Sprintf("%s: %d %.200s", g.name, r.status, r.body)
	case g.values != nil:
		return g.sameValues(r)
	case g.key(r) != g.want:
		return fmt.Sprintf("%s: answer %q, alone it was %q", g.name, g.key(r), g.want)
	}
	return ""
}

// sameValues says how r's output differs from the answer alone beyond tolerance.Kernels, or "".
func (g *goodRequest) sameValues(r response) string {
	got, err := g.values(r)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", g.name, err)
	case len(got) != len(g.wantValues):
		return fmt.Sprintf("%s: %d values, alone %d", g.name, len(got), len(g.wantValues))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - g.wantValues[i])); !(d <= tolerance.Kernels) {
			return fmt.Sprintf("%s: value %d is %v, alone it was %v (|diff| %.2g > %g)", g.name, i, got[i], g.wantValues[i], d, tolerance.Kernels)
		}
	}
	return ""
}

func topKey(r response) string { return top1(r.body) }

func captionKey(r response) string {
	var c struct{ Caption string }
	json.Unmarshal(r.body, &c)
	return c.Caption
}

func npyValues(r response) ([]float32, error) {
	a, err := npy.Decode(r.body)
	if err != nil {
		return nil, fmt.Errorf("not .npy: %v", err)
	}
	return f32s(a.Data), nil
}

func v2Values(r response) ([]float32, error) {
	var data struct {
		Outputs []struct{ Data []float32 } `json:"outputs"`
	}
	if err := json.Unmarshal(r.body, &data); err != nil || len(data.Outputs) != 1 {
		return nil, fmt.Errorf("bad v2 response %.200s", r.body)
	}
	return data.Outputs[0].Data, nil
}

// goodRequests builds one known-answer request per model and kind of input, and records
// each one's answer sent alone, before any hostile input.
func goodRequests(t *testing.T, s *server) []*goodRequest {
	t.Helper()
	imgs := heldOut(t)
	x := readZooNpy(t, "digits", "ref_input.npy")
	row := x.Data[:784*4]
	one, err := npy.Encode(npy.Array{DType: "float32", Shape: []int64{1, 1, 28, 28}, Data: row})
	if err != nil {
		t.Fatal(err)
	}
	v2body, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "input__0", "datatype": "FP32", "shape": []int{1, 1, 28, 28}, "data": f32s(row)}}})
	resnet, err := os.ReadFile(filepath.Join(zooDir, "resnet18", "sample_224.png"))
	if err != nil {
		t.Fatal(err)
	}
	scene, err := os.ReadFile(filepath.Join(zooDir, "captioner", "sample.png"))
	if err != nil {
		t.Fatal(err)
	}
	goods := []*goodRequest{
		{name: "digits PNG 0", path: "/predictions/digits", contentType: "image/png", body: imgs[0], key: topKey},
		{name: "digits PNG 1", path: "/predictions/digits", contentType: "image/png", body: imgs[1], key: topKey},
		{name: "digits PNG 2", path: "/predictions/digits", contentType: "image/png", body: imgs[2], key: topKey},
		{name: "digits_tensor .npy", path: "/predictions/digits_tensor", contentType: "application/x-npy", body: one, values: npyValues},
		{name: "digits_tensor v2 JSON", path: "/v2/models/digits_tensor/infer", contentType: "application/json", body: v2body, values: v2Values},
		{name: "textcls positive", path: "/predictions/textcls", contentType: "text/plain", body: []byte("What a wonderful film!"), key: topKey},
		{name: "textcls negative", path: "/predictions/textcls", contentType: "text/plain", body: []byte("the coffee was not good"), key: topKey},
		{name: "resnet18 PNG", path: "/predictions/resnet18", contentType: "image/png", body: resnet, key: topKey},
		{name: "captioner PNG", path: "/predictions/captioner", contentType: "image/png", body: scene, key: captionKey},
	}
	for _, g := range goods {
		r, err := g.send(s)
		if err != nil || r.status != 200 {
			t.Fatalf("%s alone: %v %d %s", g.name, err, r.status, r.body)
		}
		if g.values != nil {
			if g.wantValues, err = g.values(r); err != nil || len(g.wantValues) == 0 {
				t.Fatalf("%s alone: no values in %.200s: %v", g.name, r.body, err)
			}
			continue
		}
		g.want = g.key(r)
		if g.want == "" {
			t.Fatalf("%s alone: no answer in %s", g.name, r.body)
		}
	}
	if goods[5].want != "positive" || goods[6].want != "negative" {
		t.Fatalf("textcls alone: %q and %q", goods[5].want, goods[6].want)
	}
	return goods
}

// goodTraffic sends goods round and round from a few goroutines until stop, checking every
// answer: the "nothing else is affected" half of the hostile-input tests.
type goodTraffic struct {
	ok       atomic.Int64
	mu       sync.Mutex
	failures []string
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startGoodTraffic(s *server, goods []*goodRequest, workers int) *goodTraffic {
	g := &goodTraffic{stop: make(chan struct{})}
	for w := range workers {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for i := w; ; i++ {
				select {
				case <-g.stop:
					return
				default:
				}
				if msg := goods[i%len(goods)].check(s); msg != "" {
					g.fail(msg)
				} else {
					g.ok.Add(1)
				}
			}
		}()
	}
	return g
}

func (g *goodTraffic) fail(msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures = append(g.failures, msg)
}

// finish stops the traffic and fails t for every good request that did not get its answer.
func (g *goodTraffic) finish(t *testing.T) {
	t.Helper()
	close(g.stop)
	g.wg.Wait()
	t.Logf("good requests answered right during the hostile inputs: %d", g.ok.Load())
	for _, f := range g.failures {
		t.Errorf("good request failed: %s", f)
	}
	if g.ok.Load() == 0 {
		t.Error("no good request was answered")
	}
}

// withNeighbours sends bad once while n good requests to the same model are in flight, so
// that they share its batches, and checks every good answer.
func withNeighbours(t *testing.T, s *server, good *goodRequest, n int, bad func() response) response {
	t.Helper()
	var r response
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == n/2 {
				r = bad()
				return
			}
			if msg := good.check(s); msg != "" {
				errs <- msg
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Errorf("batch neighbour of a hostile input: %s", msg)
	}
	return r
}

// tsError returns TorchServe's {"code", "type", "message"}; code is 0 when the body is not
// that shape.
func tsError(r response) (code int, message string) {
	var e struct {
		Code    int    `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(r.body, &e) != nil || e.Code != r.status || e.Type == "" {
		return 0, ""
	}
	return e.Code, e.Message
}

// wantTS checks a TorchServe route's error: status, the JSON shape, and part of the message.
func wantTS(t *testing.T, what string, r response, status int, part string) {
	t.Helper()
	code, msg := tsError(r)
	if r.status != status || code != status || !strings.Contains(msg, part) {
		t.Errorf("%s: %d %.300s, want %d with a message containing %q", what, r.status, r.body, status, part)
	}
}

// wantV2 checks a /v2 route's error: status, {"error": ...} and part of it.
func wantV2(t *testing.T, what string, r response, status int, part string) {
	t.Helper()
	var e oip.ErrorResponse
	if r.status != status || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, part) {
		t.Errorf("%s: %d %.300s, want %d with an error containing %q", what, r.status, r.body, status, part)
	}
}

// timed runs f and logs how long the answer took, for docs/guide/reliability.md.
func timed(t *testing.T, what string, f func() response) response {
	t.Helper()
	start := time.Now()
	r := f()
	t.Logf("%s: %d in %v", what, r.status, time.Since(start).Round(100*time.Microsecond))
	return r
}

// Hostile and broken payloads, each answered 4xx with a message that says what was wrong,
// while good requests to every model run alongside and keep getting their right answers.
func TestHostileInput(t *testing.T) {
	s := newServer(t, 0)
	for _, m := range hostileModels {
		s.register(t, "url="+m+".mar&batch_size=8&max_batch_delay=50&initial_workers=1&synchronous=true")
	}
	goods := goodRequests(t, s)
	traffic := startGoodTraffic(s, goods, 2)

	t.Run("MalformedMultipart", func(t *testing.T) {
		png := pngOf(t, 8, 8)
		good := multipartBody("XB", png)
		url := "/predictions/digits"
		for _, c := range []struct {
			name, ct string
			body     []byte
			status   int
			part     string
		}{
			{"no boundary parameter", "multipart/form-data", good, 400, "malformed multipart body"},
			{"boundary that never appears", "multipart/form-data; boundary=ZZ", good, 400, "multipart"},
			{"truncated before the closing boundary", "multipart/form-data; boundary=XB", good[:len(good)-10], 400, "unexpected EOF"},
			{"part header without a colon", "multipart/form-data; boundary=XB", []byte("--XB\r\nno header here\r\n\r\nabc\r\n--XB--\r\n"), 400, "malformed MIME header"},
			{"no parts", "multipart/form-data; boundary=XB", []byte("--XB--\r\n"), 400, "no fields"},
			{"not multipart at all", "multipart/form-data; boundary=XB", bytes.Repeat([]byte("garbage "), 100), 400, "multipart"},
			{"part that is not an image", "multipart/form-data; boundary=XB", multipartBody("XB", []byte("text")), 400, "unsupported format"},
		} {
			wantTS(t, c.name, s.post(url, c.ct, c.body), c.status, c.part)
		}
		// A gzipped multipart body is decompressed by the server: a bomb of 200 MiB of
		// zeros in a 200 KB request stops at max_request_size.
		bomb := gzipped(t, multipartBody("XB", append(png, make([]byte, 200<<20)...)))
		r := timed(t, fmt.Sprintf("gzip multipart bomb (%d bytes → 200 MiB)", len(bomb)), func() response {
			return s.post(url, "multipart/form-data; boundary=XB", bomb, "Content-Encoding", "gzip")
		})
		wantTS(t, "gzip multipart bomb", r, 413, "decompresses to more than max_request_size")
		wantTS(t, "gzip multipart that is not gzip", s.post(url, "multipart/form-data; boundary=XB", good, "Content-Encoding", "gzip"), 400, "gzip")
		if r := s.post(url, "multipart/form-data; boundary=XB", gzipped(t, good), "Content-Encoding", "gzip"); r.status != 200 {
			t.Errorf("a small gzipped multipart: %d %s", r.status, r.body)
		}
	})

	t.Run("CompressedBody", func(t *testing.T) { compressedBodies(t, s) })
	t.Run("NaNAndInf", func(t *testing.T) { nanAndInf(t, s) })

	t.Run("DeepJSON", func(t *testing.T) {
		for _, depth := range []int{10_000, 100_000} {
			deep := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
			name := fmt.Sprintf("nested %d deep", depth)
			tooDeep := "exceeded max depth" // encoding/json's limit is 10,000
			pick := func(within string) string {
				if depth > 10_000 {
					return tooDeep
				}
				return within
			}
			wantTS(t, name+" tensor", s.post("/predictions/digits_tensor", "application/json", deep), 400, pick("deeper than 32"))
			wantTS(t, name+" text", s.post("/predictions/textcls", "application/json", deep), 400, pick("nests too deep"))
			wantTS(t, name+" image", s.post("/predictions/digits", "application/json", deep), 400, pick("no image"))
			wantV2(t, name+" v2", s.post("/v2/models/digits_tensor/infer", "application/json", deep), 400, pick("must be an object, got an array"))
			v1 := append(append([]byte(`{"instances": `), deep[:len(deep)-2]...), '}')
			wantV2(t, name+" v1", s.post("/v1/models/textcls:predict", "application/json", v1), 400, "")
		}
	})

	t.Run("HugeJSONArrays", func(t *testing.T) {
		// 3 M zeros, 6 MB: under max_request_size, a million times what the model takes.
		zeros := []byte(repeatJSON("0", 3_000_000))
		r := timed(t, "6 MB JSON array to the tensor handler", func() response {
			return s.post("/predictions/digits_tensor", "application/json", zeros)
		})
		wantTS(t, "huge array, tensor", r, 400, "must have shape [-1 1 28 28]")
		v2 := []byte(`{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": ` + string(zeros) + `}]}`)
		r = timed(t, "6 MB JSON array to v2", func() response { return s.post("/v2/models/digits_tensor/infer", "application/json", v2) })
		wantV2(t, "huge array, v2", r, 400, "")
		r = timed(t, "6 MB JSON array to the text classifier", func() response {
			return s.post("/predictions/textcls", "application/json", zeros)
		})
		wantTS(t, "huge array, text", r, 400, "must hold strings")
		r = timed(t, "6 MB JSON array to the image classifier", func() response {
			return s.post("/predictions/digits", "application/json", zeros)
		})
		wantTS(t, "huge array, image", r, 400, "base64 strings")
	})

	t.Run("ShapeOverflow", func(t *testing.T) {
		huge := "[4294967296, 4294967296, 4294967296]"
		wantTS(t, "JSON tensor", s.post("/predictions/digits_tensor", "application/json", []byte(`{"data": [1], "shape": `+huge+`}`)), 400, "too large")
		wantTS(t, "JSON tensor, a dimension past int64", s.post("/predictions/digits_tensor", "application/json", []byte(`{"data": [1], "shape": [99999999999999999999]}`)), 400, "non-negative integers")
		wantTS(t, ".npy", s.post("/predictions/digits_tensor", "application/x-npy", npyWithHeader("(4294967296, 4294967296, 4294967296)", nil)), 400, "too large")
		wantV2(t, "v2 JSON", s.post("/v2/models/digits_tensor/infer", "application/json",
			[]byte(`{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": `+huge+`, "data": [1]}]}`)), 400, "too many elements")
		hdr := `{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": ` + huge + `, "parameters": {"binary_data_size": 4}}]}`
		wantV2(t, "v2 binary", s.post("/v2/models/digits_tensor/infer", "application/octet-stream", append([]byte(hdr), 0, 0, 0, 0),
			oip.HeaderContentLength, fmt.Sprint(len(hdr))), 400, "too many elements")
		wantV2(t, "v2 negative dimension", s.post("/v2/models/digits_tensor/infer", "application/json",
			[]byte(`{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, -1, 28, 28], "data": [1]}]}`)), 400, "negative")
	})

	t.Run("DeclaredSizeLargerThanData", func(t *testing.T) {
		wantTS(t, "JSON tensor", s.post("/predictions/digits_tensor", "application/json", []byte(`{"data": [1, 2, 3], "shape": [1000, 1, 28, 28]}`)), 400, "needs 784000 values, data has 3")
		wantTS(t, ".npy shape", s.post("/predictions/digits_tensor", "application/x-npy", npyWithHeader("(1000, 1, 28, 28)", make([]byte, 3136))), 400, "needs 3136000 data bytes, got 3136")
		wantTS(t, ".npy header length", s.post("/predictions/digits_tensor", "application/x-npy", []byte("\x93NUMPY\x01\x00\xff\xff{}")), 400, "header length 65535 exceeds the data")
		wantTS(t, ".npy 2.0 header length", s.post("/predictions/digits_tensor", "application/x-npy", []byte("\x93NUMPY\x02\x00\xff\xff\xff\xff{}")), 400, "header length 4294967295 exceeds the data")
		wantV2(t, "v2 JSON", s.post("/v2/models/digits_tensor/infer", "application/json",
			[]byte(`{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1000, 1, 28, 28], "data": [1]}]}`)), 400, "needs 784000 elements")
		v2bin := func(bds string, data int) []byte {
			h := `{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "parameters": {"binary_data_size": ` + bds + `}}]}`
			return append([]byte(h), make([]byte, data)...)
		}
		hl := func(b []byte) string { return fmt.Sprint(bytes.IndexByte(b, 0)) }
		b := v2bin("1000000000000", 3136)
		wantV2(t, "v2 binary_data_size 1e12", s.post("/v2/models/digits_tensor/infer", "application/octet-stream", b, oip.HeaderContentLength, hl(b)), 400, "binary_data_size is 1000000000000 but only 3136 bytes")
		b = v2bin("3136", 100)
		wantV2(t, "v2 binary_data_size past the body", s.post("/v2/models/digits_tensor/infer", "application/octet-stream", b, oip.HeaderContentLength, hl(b)), 400, "only 100 bytes")
		b = v2bin("3136", 3136)
		wantV2(t, "v2 header length past the body", s.post("/v2/models/digits_tensor/infer", "application/octet-stream", b, oip.HeaderContentLength, "99999999999"), 400, "but the body has only")
		wantV2(t, "v2 header length past int64", s.post("/v2/models/digits_tensor/infer", "application/octet-stream", b, oip.HeaderContentLength, "99999999999999999999999"), 400, "invalid Inference-Header-Content-Length")
	})

	t.Run("ImageBombs", func(t *testing.T) {
		for _, c := range []struct {
			name string
			img  []byte
		}{
			{"PNG 50000x50000", bombPNG(50000, 50000)},
			{"JPEG 50000x50000", bombJPEG(t, 50000, 50000)},
			{"GIF 50000x50000", bombGIF(t, 50000, 50000)},
			{"BMP 50000x50000", bombBMP(t, 50000, 50000)},
		} {
			for _, model := range []string{"digits", "resnet18", "captioner"} {
				r := timed(t, c.name+" to "+model, func() response { return s.post("/predictions/"+model, "image/png", c.img) })
				wantTS(t, c.name+" to "+model, r, 400, "50000x50000, over the limit of 40000000 pixels")
			}
		}
		b64 := base64.StdEncoding.EncodeToString(bombPNG(50000, 50000))
		wantTS(t, "PNG bomb as base64 JSON", s.post("/predictions/resnet18", "application/json", []byte(`{"data": "`+b64+`"}`)), 400, "over the limit")
		wantTS(t, "PNG bomb in multipart, second of two", s.post("/predictions/resnet18", "multipart/form-data; boundary=XB",
			multipartBody("XB", pngOf(t, 8, 8), bombPNG(50000, 50000))), 400, "image 1: vision: bad image: too large")
		// Many tiny images: 67 bytes each, 600 KB each as a ResNet tensor.
		tiny := base64.StdEncoding.EncodeToString(pngOf(t, 1, 1))
		many := []byte(repeatJSON(`"`+tiny+`"`, 60_000))
		r := timed(t, fmt.Sprintf("60,000 tiny PNGs in one %d-byte request to resnet18", len(many)), func() response {
			return s.post("/predictions/resnet18", "application/json", many)
		})
		wantTS(t, "60,000 tiny images", r, 400, "the request has 60000 images; this model takes at most 64")
	})

	t.Run("TruncatedAndCorruptImages", func(t *testing.T) {
		png := pngOf(t, 8, 8)
		corrupt := bytes.Clone(png)
		corrupt[len(corrupt)-20] ^= 0xff // inside IDAT: the zlib checksum fails
		var jb bytes.Buffer
		jpeg.Encode(&jb, image.NewRGBA(image.Rect(0, 0, 64, 64)), nil)
		j := jb.Bytes()
		for _, c := range []struct {
			name string
			img  []byte
			part string
		}{
			{"truncated PNG", png[:len(png)-20], "truncated"},
			{"PNG with a corrupt IDAT", corrupt, "corrupt"},
			{"PNG signature only", png[:8], "truncated"},
			{"truncated JPEG", j[:len(j)/2], "corrupt or truncated"},
			{"JPEG markers only", []byte("\xff\xd8\xff\xd9"), "corrupt or truncated"},
			{"TIFF", []byte("II*\x00\x08\x00\x00\x00"), "TIFF"},
			{"random bytes", []byte("\x00\x01\x02garbage"), "unrecognised leading bytes"},
			{"empty", nil, "empty"},
		} {
			wantTS(t, c.name, s.post("/predictions/digits", "image/png", c.img), 400, c.part)
		}
	})

	t.Run("InvalidUTF8", func(t *testing.T) {
		url := "/predictions/textcls"
		wantTS(t, "raw text", s.post(url, "text/plain", []byte("caf\xe9 was great")), 400, "not valid UTF-8")
		wantTS(t, "JSON string", s.post(url, "application/json", []byte("{\"text\": \"caf\xe9\"}")), 400, "not valid UTF-8")
		wantTS(t, "multipart field", s.post(url, "multipart/form-data; boundary=XB",
			[]byte("--XB\r\nContent-Disposition: form-data; name=\"t\"\r\n\r\ncaf\xe9 ok\r\n--XB--\r\n")), 400, `input "t" is not valid UTF-8`)
		wantTS(t, "overlong encoding", s.post(url, "text/plain", []byte("\xc0\xaf")), 400, "not valid UTF-8")
		wantTS(t, "lone surrogate", s.post(url, "text/plain", []byte("\xed\xa0\x80")), 400, "not valid UTF-8")
		v2 := "/v2/models/textcls/infer"
		wantV2(t, "v2 BYTES in JSON", s.post(v2, "application/json",
			[]byte("{\"inputs\": [{\"name\": \"input_ids\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [\"caf\xe9\"]}]}")), 400, "not valid UTF-8")
		wantV2(t, "v2 input name", s.post("/v2/models/digits_tensor/infer", "application/json",
			[]byte("{\"inputs\": [{\"name\": \"in\xff\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1]}]}")), 400, "not valid UTF-8")
		hdr := `{"inputs": [{"name": "input_ids", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 8}}, ` +
			`{"name": "attention_mask", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 8}}]}`
		body := append([]byte(hdr), 4, 0, 0, 0, 0xff, 0xfe, 0xfd, 0xfc, 4, 0, 0, 0, 0xff, 0xfe, 0xfd, 0xfc)
		wantV2(t, "v2 binary BYTES", s.post(v2, "application/octet-stream", body, oip.HeaderContentLength, fmt.Sprint(len(hdr))), 400, `input "input_ids" must be INT64, got BYTES`)
	})

	t.Run("BatchNeighbours", func(t *testing.T) {
		// Each bad request reaches the model's batch; the good ones in flight with it, to the
		// same model, still get their own answers.
		textPos := goods[5]
		ids := func(vals ...int) []byte {
			b, _ := json.Marshal(map[string]any{"inputs": []any{
				map[string]any{"name": "input_ids", "datatype": "INT64", "shape": []int{1, len(vals)}, "data": vals},
				map[string]any{"name": "attention_mask", "datatype": "INT64", "shape": []int{1, len(vals)}, "data": slicesOf(1, len(vals))},
			}})
			return b
		}
		for round := range 3 {
			r := withNeighbours(t, s, textPos, 7, func() response {
				return s.post("/v2/models/textcls/infer", "application/json", ids(2, 1_000_000, 3))
			})
			wantV2(t, fmt.Sprintf("round %d: token id outside the vocabulary", round), r, 400, "id 1000000 at position 1 is outside the vocabulary")
			r = withNeighbours(t, s, textPos, 7, func() response {
				return s.post("/v2/models/textcls/infer", "application/json", ids(slicesOf(5, 500)...))
			})
			wantV2(t, fmt.Sprintf("round %d: 500 token ids", round), r, 400, "500 ids exceed the maximum length of 64")
		}
		// 3e38 is a float32, but the CNN overflows on it: the NaN outputs come back as .npy,
		// and the neighbours' outputs stay finite and their own.
		big := []byte(`{"data": ` + repeatJSON("3e38", 784) + `, "shape": [1, 1, 28, 28]}`)
		r := withNeighbours(t, s, goods[3], 7, func() response { return s.post("/predictions/digits_tensor", "application/json", big) })
		if a, err := npy.Decode(r.body); r.status != 200 || r.contentType != "application/x-npy" || err != nil || !math.IsNaN(float64(f32s(a.Data)[0])) {
			t.Errorf("NaN outputs: %d %s %q", r.status, r.contentType, r.body)
		}
		r = withNeighbours(t, s, goods[3], 7, func() response {
			return s.post("/predictions/digits_tensor", "application/json", []byte(`{"data": `+repeatJSON("1e300", 784)+`, "shape": [1, 1, 28, 28]}`))
		})
		wantTS(t, "1e300 as float32", r, 400, "1e300 is out of range for float32")
		r = withNeighbours(t, s, goods[0], 7, func() response { return s.post("/predictions/digits", "image/png", bombPNG(50000, 50000)) })
		wantTS(t, "PNG bomb among digits", r, 400, "over the limit")
		if mean := s.meanBatch(t, "textcls"); mean <= 1 {
			t.Errorf("textcls formed no batches larger than 1 (mean %.2f): the neighbours did not share batches", mean)
		}
	})

	traffic.finish(t)
	if r := s.do("GET", "/ping", "", nil); r.status != 200 {
		t.Fatalf("ping after the hostile inputs: %d %s", r.status, r.body)
	}
	if strings.Contains(s.Log(), "panic") {
		t.Fatalf("the server log has a panic:\n%s", s.Log())
	}
}

func slicesOf(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}
