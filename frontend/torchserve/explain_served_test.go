package torchserve_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/zootest"
)

// Explanations with real models (the zoo's digits CNN and text classifier) through
// TorchServe's /explanations and KServe's v1 :explain and v2 /explain, compared with Captum's
// (models/explain_ref.py writes ig_ref.json).

type imageIGRef struct {
	File         string    `json:"file"`
	Target       int       `json:"target"`
	Attributions []float64 `json:"attributions"`
}

type textIGRef struct {
	Text        string    `json:"text"`
	Target      int       `json:"target"`
	Importances []float64 `json:"importances"`
	Words       []string  `json:"words"`
}

func readRef(t *testing.T, model string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zoo, model, "ig_ref.json"))
	if err != nil {
		t.Fatalf("%v (run models/explain_ref.py, or make models)", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// flatFloats flattens nested JSON lists of numbers.
func flatFloats(t *testing.T, v any) []float64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return []float64{x}
	case []any:
		var out []float64
		for _, e := range x {
			out = append(out, flatFloats(t, e)...)
		}
		return out
	}
	t.Fatalf("not a list of numbers: %T", v)
	return nil
}

func within(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, scale := 0.0, 0.0
	for i := range want {
		worst = max(worst, math.Abs(got[i]-want[i]))
		scale = max(scale, math.Abs(want[i]))
	}
	t.Logf("%s: max abs difference from Captum %.2g (largest attribution %.3g)", what, worst, scale)
	if worst > tol {
		t.Fatalf("%s: max abs difference from Captum %g > %g", what, worst, tol)
	}
}

// Explanations of the digits image classifier equal Captum's IntegratedGradients (15 steps,
// zero baseline, TorchServe's vision handler call) within 1e-4, through POST /explanations
// (raw body: TorchServe's default target 0; multipart with a target field; JSON with a
// "target" key), KServe v1
// :explain and KServe v2 /explain, in TorchServe's response shapes.
func TestExplainImageMatchesCaptum(t *testing.T) {
	var refs []imageIGRef
	readRef(t, "digits", &refs)
	s := serve(t, 1, []storeArchive{digitsV1})
	s.register(t, "url=digits.mar&initial_workers=1")
	for i, ref := range refs {
		png, err := os.ReadFile(filepath.Join(zoo, "digits", "heldout", ref.File))
		if err != nil {
			t.Fatal(err)
		}
		var r response
		switch {
		case ref.Target == 0:
			r = s.inf("POST", "/explanations/digits", "image/png", png)
		case i == len(refs)-1:
			b, _ := json.Marshal(map[string]any{"data": base64.StdEncoding.EncodeToString(png), "target": ref.Target})
			r = s.inf("POST", "/explanations/digits", "application/json", b)
		default:
			var body bytes.Buffer
			w := multipart.NewWriter(&body)
			f, _ := w.CreateFormFile("data", ref.File)
			f.Write(png)
			w.WriteField("target", itoa(ref.Target))
			w.Close()
			r = s.inf("POST", "/explanations/digits", w.FormDataContentType(), body.Bytes())
		}
		var attr [][][]float64 // [C][H][W], TorchServe's attributions.tolist() for one image
		r.json(t, &attr)
		if r.status != 200 || len(attr) != 1 || len(attr[0]) != 28 || len(attr[0][0]) != 28 {
			t.Fatalf("%s: %d %.200s", ref.File, r.status, r.body)
		}
		var v any
		json.Unmarshal(r.body, &v)
		within(t, ref.File+" /explanations", flatFloats(t, v), ref.Attributions, 1e-4)
		if ref.Target == 0 {
			// curl -T, as TorchServe's READMEs send files: the same explanation.
			var put any
			if p := s.inf("PUT", "/explanations/digits", "image/png", png); p.status != 200 {
				t.Fatalf("PUT /explanations/digits: %d %s", p.status, p.body)
			} else {
				p.json(t, &put)
			}
			within(t, ref.File+" PUT /explanations", flatFloats(t, put), ref.Attributions, 1e-4)
		}

		// KServe v1.
		v1 := []byte(`{"instances": [{"data": "` + base64.StdEncoding.EncodeToString(png) + `"}], "target": ` + itoa(ref.Target) + `}`)
		r = s.inf("POST", "/v1/models/digits:explain", "application/json", v1)
		var ex struct{ Explanations []any }
		r.json(t, &ex)
		if r.status != 200 || len(ex.Explanations) != 1 {
			t.Fatalf("v1 explain: %d %.200s", r.status, r.body)
		}
		within(t, ref.File+" v1 :explain", flatFloats(t, ex.Explanations[0]), ref.Attributions, 1e-4)

		// KServe v2, through the handler: one FP64 output named after the input, flattened.
		in := digitsTensor(t, png)
		b, _ := json.Marshal(map[string]any{"parameters": map[string]any{"target": ref.Target},
			"inputs": []any{map[string]any{"name": "input-0", "shape": []int{1, 28, 28}, "datatype": "FP32", "data": in}}})
		r = s.inf("POST", "/v2/models/digits/explain", "application/json", b)
		var v2 struct {
			ModelName string `json:"model_name"`
			Outputs   []struct {
				Name     string    `json:"name"`
				Datatype string    `json:"datatype"`
				Shape    []int     `json:"shape"`
				Data     []float64 `json:"data"`
			} `json:"outputs"`
		}
		r.json(t, &v2)
		if r.status != 200 || v2.ModelName != "digits" || len(v2.Outputs) != 1 || v2.Outputs[0].Name != "input-0" || v2.Outputs[0].Datatype != "FP64" ||
			len(v2.Outputs[0].Shape) != 1 || v2.Outputs[0].Shape[0] != 784 {
			t.Fatalf("v2 explain: %d %.300s", r.status, r.body)
		}
		within(t, ref.File+" v2 /explain", v2.Outputs[0].Data, ref.Attributions, 1e-4)
	}
}

// Text explanations equal Captum's Integrated Gradients with respect to the token
// embeddings, from an all-[PAD] reference, summed per token and scaled to unit norm.
func TestExplainTextMatchesCaptum(t *testing.T) {
	var refs []textIGRef
	readRef(t, "textcls", &refs)
	s := serve(t, 1, []storeArchive{textcls})
	s.register(t, "url=textcls.mar&initial_workers=1")
	for _, ref := range refs {
		var r response
		if ref.Target == 0 {
			r = s.inf("POST", "/explanations/textcls", "text/plain", []byte(ref.Text))
		} else {
			b, _ := json.Marshal(map[string]any{"data": ref.Text, "target": ref.Target})
			r = s.inf("POST", "/explanations/textcls", "application/json", b)
		}
		var got textIGRef
		r.json(t, &got)
		if r.status != 200 || len(got.Words) != len(ref.Words) {
			t.Fatalf("%q: %d %s", ref.Text, r.status, r.body)
		}
		for i := range ref.Words {
			if got.Words[i] != ref.Words[i] {
				t.Fatalf("%q: words %v, want %v", ref.Text, got.Words, ref.Words)
			}
		}
		within(t, ref.Text, got.Importances, ref.Importances, 1e-4)
	}
}

// What cannot be explained is answered with TorchServe's error shapes.
func TestExplainErrors(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, digitsTensorArchive, textcls})
	s.register(t, "url=digits.mar&initial_workers=1")
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	s.register(t, "url=textcls.mar&initial_workers=1")
	pngs, _ := heldOut(t)
	errorShape(t, s.inf("POST", "/explanations/nope", "image/png", pngs[0]), 404, "ModelNotFoundException", "")
	errorShape(t, s.inf("POST", "/explanations/digits_tensor", "application/json", []byte(`[1]`)), 501, "NotImplementedException", "does not explain")
	errorShape(t, s.inf("POST", "/explanations/digits", "image/png", []byte("garbage")), 400, "BadRequestException", "")
	errorShape(t, s.inf("POST", "/explanations/textcls", "text/plain", nil), 400, "BadRequestException", "")
	mp := func(target string) (string, []byte) {
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		f, _ := w.CreateFormFile("data", "d.png")
		f.Write(pngs[0])
		w.WriteField("target", target)
		w.Close()
		return w.FormDataContentType(), body.Bytes()
	}
	ct, b := mp("10")
	errorShape(t, s.inf("POST", "/explanations/digits", ct, b), 400, "BadRequestException", "not a class")
	ct, b = mp("seven")
	errorShape(t, s.inf("POST", "/explanations/digits", ct, b), 400, "BadRequestException", "target")

	v2Err := func(r response, status int, part string) {
		t.Helper()
		var e struct{ Error string }
		r.json(t, &e)
		if r.status != status || !bytes.Contains([]byte(e.Error), []byte(part)) {
			t.Fatalf("got %d %s, want %d with %q", r.status, r.body, status, part)
		}
	}
	var only bytes.Buffer
	w := multipart.NewWriter(&only)
	w.WriteField("target", "1")
	w.Close()
	errorShape(t, s.inf("POST", "/explanations/digits", w.FormDataContentType(), only.Bytes()), 400, "BadRequestException", "no input to explain")
	v2Err(s.inf("POST", "/v1/models/digits:explain", "application/json", []byte(`{"instances": [{"data": ""}], "target": -1}`)), 400, "target")
	v2Err(s.inf("POST", "/v1/models/nope:explain", "application/json", []byte(`{"instances": [1]}`)), 404, "")
	v2Err(s.inf("POST", "/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["x"]}]}`)), 400, "got string [1]")
	v2Err(s.inf("POST", "/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}`)), 400, "float32 [1, 28, 28]")
	v2Err(s.inf("POST", "/v1/models/digits_tensor:explain", "application/json", []byte(`{"instances": [[1]]}`)), 501, "does not explain")
	v2Err(s.inf("POST", "/v1/models/digits:explain", "application/json", []byte(`{"nope": 1}`)), 400, "instances")
	v2Err(s.inf("POST", "/v2/models/textcls/explain", "application/json", []byte(`{"inputs": []}`)), 501, "does not explain")
	v2Err(s.inf("POST", "/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"b","shape":[1],"datatype":"FP32","data":[1]}]}`)), 400, "one input")
	v2Err(s.inf("POST", "/v2/models/digits/explain", "application/json",
		[]byte(`{"parameters":{"target":-1},"inputs":[{"name":"a","shape":[1,28,28],"datatype":"FP32","data":[`+zeros(784)+`]}]}`)), 400, "target")
	v2Err(s.inf("POST", "/v2/models/nope/explain", "application/json", []byte(`{"inputs": []}`)), 404, "")
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func zeros(n int) string { return string(bytes.Repeat([]byte("0,"), n-1)) + "0" }

// digitsTensor is a held-out digit as the digits model takes it: [1, 28, 28], pixels/255
// normalized with mean 0.5 and std 0.5, as JSON data.
func digitsTensor(t *testing.T, b []byte) []float32 {
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 28, 28) {
		t.Fatalf("held-out digit is %v", img.Bounds())
	}
	out := make([]float32, 0, 28*28)
	for y := range 28 {
		for x := range 28 {
			g := color.GrayModel.Convert(img.At(x, y)).(color.Gray)
			out = append(out, (float32(g.Y)/255-0.5)/0.5)
		}
	}
	return out
}

func v2Body(name string, shape []int, data []float32) []byte {
	b, _ := json.Marshal(map[string]any{"id": "req-1", "inputs": []any{map[string]any{"name": name, "shape": shape, "datatype": "FP32", "data": data}}})
	return b
}

type tsV2Response struct {
	ID           string `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name     string            `json:"name"`
		Datatype string            `json:"datatype"`
		Shape    []int64           `json:"shape"`
		Data     []json.RawMessage `json:"data"`
	} `json:"outputs"`
}

// A KServe v2 request that does not name the model's inputs goes through the model's
// handler, as TorchServe's kservev2 envelope sends it: a client's "input-0" [1, 28, 28] to
// the digits image classifier gets its top-k, as an output named after the input. One that
// names them keeps Triton's semantics.
func TestKServeV2ThroughHandler(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, digitsTensorArchive, textcls})
	s.register(t, "url=digits.mar&initial_workers=1")
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	s.register(t, "url=textcls.mar&initial_workers=1")
	pngs, labels := heldOut(t)
	for i := range 3 {
		data := digitsTensor(t, pngs[i])
		r := s.inf("POST", "/v2/models/digits/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, data))
		var resp tsV2Response
		r.json(t, &resp)
		if r.status != 200 || resp.ID != "req-1" || resp.ModelName != "digits" || resp.ModelVersion != "1.0" || len(resp.Outputs) != 1 {
			t.Fatalf("v2 through the image classifier: %d %s", r.status, r.body)
		}
		o := resp.Outputs[0]
		if o.Name != "input-0" || o.Datatype != "BYTES" || len(o.Shape) != 1 || o.Shape[0] != 1 || len(o.Data) != 1 {
			t.Fatalf("output in TorchServe's shape: %s", r.body)
		}
		if got := top1(o.Data[0]); got != labels[i] {
			t.Errorf("digit %d: top-1 %q, want %q (%s)", i, got, labels[i], r.body)
		}

		// The tensor handler answers its tensor, flattened, with its datatype.
		r = s.inf("POST", "/v2/models/digits_tensor/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, data))
		resp = tsV2Response{}
		r.json(t, &resp)
		if r.status != 200 || len(resp.Outputs) != 1 || resp.Outputs[0].Name != "input-0" || resp.Outputs[0].Datatype != "FP32" ||
			fmt.Sprint(resp.Outputs[0].Shape) != "[10]" || len(resp.Outputs[0].Data) != 10 || resp.ID != "req-1" {
			t.Fatalf("v2 through the tensor handler: %d %s", r.status, r.body)
		}
	}
	// A BYTES input is the handler's payload: a text for the text classifier.
	r0 := s.inf("POST", "/v2/models/textcls/infer", "application/json", []byte(`{"id":"t","inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a great movie","an awful movie"]}]}`))
	var tr tsV2Response
	r0.json(t, &tr)
	if r0.status != 200 || len(tr.Outputs) != 1 || tr.Outputs[0].Name != "text" || tr.Outputs[0].Datatype != "BYTES" || len(tr.Outputs[0].Data) != 2 {
		t.Fatalf("v2 BYTES texts through the text classifier: %d %s", r0.status, r0.body)
	}

	// A request without an id gets one.
	b := bytes.Replace(v2Body("input-0", []int{1, 28, 28}, digitsTensor(t, pngs[0])), []byte(`"id":"req-1",`), nil, 1)
	var resp tsV2Response
	r := s.inf("POST", "/v2/models/digits/infer", "application/json", b)
	r.json(t, &resp)
	if r.status != 200 || len(resp.ID) != 36 {
		t.Fatalf("no id: %d %s", r.status, r.body)
	}

	// Naming the model's input keeps Triton's semantics: the logits, as output__0.
	r = s.inf("POST", "/v2/models/digits/infer", "application/json", v2Body("input__0", []int{1, 1, 28, 28}, digitsTensor(t, pngs[0])))
	if r.status != 200 || !strings.Contains(string(r.body), `"name":"output__0"`) || !strings.Contains(string(r.body), `"shape":[1,10]`) {
		t.Fatalf("Triton semantics: %d %s", r.status, r.body)
	}

	// Errors: a tensor the handler cannot take, two inputs, and a handler that takes no
	// tensors (the text classifier keeps Triton's answer).
	v2Err := func(r response, status int, part string) {
		t.Helper()
		var e struct{ Error string }
		r.json(t, &e)
		if r.status != status || !strings.Contains(e.Error, part) {
			t.Fatalf("got %d %s, want %d with %q", r.status, r.body, status, part)
		}
	}
	v2Err(s.inf("POST", "/v2/models/digits/infer", "application/json", v2Body("input-0", []int{1, 27, 27}, make([]float32, 27*27))), 400, "float32 [1, 28, 28]")
	v2Err(s.inf("POST", "/v2/models/digits_tensor/infer", "application/json", v2Body("input-0", []int{2, 2}, make([]float32, 4))), 400, "must have shape")
	v2Err(s.inf("POST", "/v2/models/digits/infer", "application/json", []byte(`{"inputs":[{"name":"input-0","shape":[1],"datatype":"BYTES","data":["x"]}]}`)), 400, `input "input-0": text input must be a base64-encoded image`)
	two := []byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"b","shape":[1],"datatype":"FP32","data":[1]}]}`)
	v2Err(s.inf("POST", "/v2/models/digits/infer", "application/json", two), 400, "takes one input")
	v2Err(s.inf("POST", "/v2/models/textcls/infer", "application/json", []byte(`{"inputs":[{"name":"text","shape":[1],"datatype":"INT64","data":[1]}]}`)), 400, "model takes 2 inputs")
}

// top1 returns the first key of a TorchServe top-k object, which is in descending order.
func top1(body []byte) string { return zootest.Top1(body) }
