package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
)

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
	s := startServer(t)
	s.register(t, "url=digits.mar&initial_workers=1")
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	s.register(t, "url=textcls.mar&initial_workers=1")
	pngs, labels := heldOut(t)
	for i := range 3 {
		data := digitsTensor(t, pngs[i])
		r := do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, data))
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
		r = do(t, "POST", s.inf+"/v2/models/digits_tensor/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, data))
		resp = tsV2Response{}
		r.json(t, &resp)
		if r.status != 200 || len(resp.Outputs) != 1 || resp.Outputs[0].Name != "input-0" || resp.Outputs[0].Datatype != "FP32" ||
			fmt.Sprint(resp.Outputs[0].Shape) != "[10]" || len(resp.Outputs[0].Data) != 10 || resp.ID != "req-1" {
			t.Fatalf("v2 through the tensor handler: %d %s", r.status, r.body)
		}
	}
	// A BYTES input is the handler's payload: a text for the text classifier.
	r0 := do(t, "POST", s.inf+"/v2/models/textcls/infer", "application/json", []byte(`{"id":"t","inputs":[{"name":"text","shape":[2],"datatype":"BYTES","data":["a great movie","an awful movie"]}]}`))
	var tr tsV2Response
	r0.json(t, &tr)
	if r0.status != 200 || len(tr.Outputs) != 1 || tr.Outputs[0].Name != "text" || tr.Outputs[0].Datatype != "BYTES" || len(tr.Outputs[0].Data) != 2 {
		t.Fatalf("v2 BYTES texts through the text classifier: %d %s", r0.status, r0.body)
	}

	// A request without an id gets one.
	b := bytes.Replace(v2Body("input-0", []int{1, 28, 28}, digitsTensor(t, pngs[0])), []byte(`"id":"req-1",`), nil, 1)
	var resp tsV2Response
	r := do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", b)
	r.json(t, &resp)
	if r.status != 200 || len(resp.ID) != 36 {
		t.Fatalf("no id: %d %s", r.status, r.body)
	}

	// Naming the model's input keeps Triton's semantics: the logits, as output__0.
	r = do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", v2Body("input__0", []int{1, 1, 28, 28}, digitsTensor(t, pngs[0])))
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
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", v2Body("input-0", []int{1, 27, 27}, make([]float32, 27*27))), 400, "float32 [1, 28, 28]")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits_tensor/infer", "application/json", v2Body("input-0", []int{2, 2}, make([]float32, 4))), 400, "must have shape")
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", []byte(`{"inputs":[{"name":"input-0","shape":[1],"datatype":"BYTES","data":["x"]}]}`)), 400, `input "input-0": text input must be a base64-encoded image`)
	two := []byte(`{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"b","shape":[1],"datatype":"FP32","data":[1]}]}`)
	v2Err(do(t, "POST", s.inf+"/v2/models/digits/infer", "application/json", two), 400, "takes one input")
	v2Err(do(t, "POST", s.inf+"/v2/models/textcls/infer", "application/json", []byte(`{"inputs":[{"name":"text","shape":[1],"datatype":"INT64","data":[1]}]}`)), 400, "model takes 2 inputs")
}
