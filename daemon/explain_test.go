package daemon_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"mime/multipart"
	"os"
	"path/filepath"
	"testing"
)

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
	b, err := os.ReadFile(filepath.Join(zooDir, model, "ig_ref.json"))
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
	s := startServer(t)
	s.register(t, "url=digits.mar&initial_workers=1")
	for i, ref := range refs {
		png, err := os.ReadFile(filepath.Join(zooDir, "digits", "heldout", ref.File))
		if err != nil {
			t.Fatal(err)
		}
		var r response
		switch {
		case ref.Target == 0:
			r = do(t, "POST", s.inf+"/explanations/digits", "image/png", png)
		case i == len(refs)-1:
			b, _ := json.Marshal(map[string]any{"data": base64.StdEncoding.EncodeToString(png), "target": ref.Target})
			r = do(t, "POST", s.inf+"/explanations/digits", "application/json", b)
		default:
			var body bytes.Buffer
			w := multipart.NewWriter(&body)
			f, _ := w.CreateFormFile("data", ref.File)
			f.Write(png)
			w.WriteField("target", itoa(ref.Target))
			w.Close()
			r = do(t, "POST", s.inf+"/explanations/digits", w.FormDataContentType(), body.Bytes())
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
			if p := do(t, "PUT", s.inf+"/explanations/digits", "image/png", png); p.status != 200 {
				t.Fatalf("PUT /explanations/digits: %d %s", p.status, p.body)
			} else {
				p.json(t, &put)
			}
			within(t, ref.File+" PUT /explanations", flatFloats(t, put), ref.Attributions, 1e-4)
		}

		// KServe v1.
		v1 := []byte(`{"instances": [{"data": "` + base64.StdEncoding.EncodeToString(png) + `"}], "target": ` + itoa(ref.Target) + `}`)
		r = do(t, "POST", s.inf+"/v1/models/digits:explain", "application/json", v1)
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
		r = do(t, "POST", s.inf+"/v2/models/digits/explain", "application/json", b)
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
	s := startServer(t)
	s.register(t, "url=textcls.mar&initial_workers=1")
	for _, ref := range refs {
		var r response
		if ref.Target == 0 {
			r = do(t, "POST", s.inf+"/explanations/textcls", "text/plain", []byte(ref.Text))
		} else {
			b, _ := json.Marshal(map[string]any{"data": ref.Text, "target": ref.Target})
			r = do(t, "POST", s.inf+"/explanations/textcls", "application/json", b)
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
	s := startServer(t)
	s.register(t, "url=digits.mar&initial_workers=1")
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	s.register(t, "url=textcls.mar&initial_workers=1")
	pngs, _ := heldOut(t)
	errorShape(t, do(t, "POST", s.inf+"/explanations/nope", "image/png", pngs[0]), 404, "ModelNotFoundException", "")
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits_tensor", "application/json", []byte(`[1]`)), 501, "NotImplementedException", "does not explain")
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits", "image/png", []byte("garbage")), 400, "BadRequestException", "")
	errorShape(t, do(t, "POST", s.inf+"/explanations/textcls", "text/plain", nil), 400, "BadRequestException", "")
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
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits", ct, b), 400, "BadRequestException", "not a class")
	ct, b = mp("seven")
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits", ct, b), 400, "BadRequestException", "target")

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
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits", w.FormDataContentType(), only.Bytes()), 400, "BadRequestException", "no input to explain")
	v2Err(do(t, "POST", s.inf+"/v1/models/digits:explain", "application/json", []byte(`{"instances": [{"data": ""}], "target": -1}`)), 400, "target")
	v2Err(do(t, "POST", s.inf+"/v1/models/nope:explain", "application/json", []byte(`{"instances": [1]}`)), 404, "")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["x"]}]}`)), 400, "got string [1]")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1,2,2],"datatype":"FP32","data":[1,2,3,4]}]}`)), 400, "float32 [1, 28, 28]")
	v2Err(do(t, "POST", s.inf+"/v1/models/digits_tensor:explain", "application/json", []byte(`{"instances": [[1]]}`)), 501, "does not explain")
	v2Err(do(t, "POST", s.inf+"/v1/models/digits:explain", "application/json", []byte(`{"nope": 1}`)), 400, "instances")
	v2Err(do(t, "POST", s.inf+"/v2/models/textcls/explain", "application/json", []byte(`{"inputs": []}`)), 501, "does not explain")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/explain", "application/json",
		[]byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"b","shape":[1],"datatype":"FP32","data":[1]}]}`)), 400, "one input")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/explain", "application/json",
		[]byte(`{"parameters":{"target":-1},"inputs":[{"name":"a","shape":[1,28,28],"datatype":"FP32","data":[`+zeros(784)+`]}]}`)), 400, "target")
	v2Err(do(t, "POST", s.inf+"/v2/models/nope/explain", "application/json", []byte(`{"inputs": []}`)), 404, "")
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func zeros(n int) string { return string(bytes.Repeat([]byte("0,"), n-1)) + "0" }
