package onnxrt_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/onnxrt"
)

// zoo is the path of a file of models/onnx_zoo.py's output.
func zoo(t testing.TB, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{"..", "models", "out", "onnx"}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make models-onnx` first", err)
	}
	return p
}

var npyTypes = map[string]onnxrt.ElemType{
	"float32": onnxrt.Float32, "float16": onnxrt.Float16, "float64": onnxrt.Float64,
	"int64": onnxrt.Int64, "int32": onnxrt.Int32, "int16": onnxrt.Int16, "int8": onnxrt.Int8,
	"uint8": onnxrt.Uint8, "bool": onnxrt.Bool,
}

func readValue(t testing.TB, path string) onnxrt.Value {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return onnxrt.Value{Type: npyTypes[a.DType], Shape: a.Shape, Data: a.Data}
}

// refCase is one case of a model's refs.json: its inputs and onnxruntime's outputs in Python.
type refCase struct {
	Name    string
	Inputs  []string // names, in refs.json's order
	In      []onnxrt.Value
	Outputs []string
	Out     []onnxrt.Value
}

func refs(t testing.TB, model string) []refCase {
	t.Helper()
	b, err := os.ReadFile(zoo(t, model, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	// json.RawMessage keeps the order of the inputs, which a map would lose.
	var doc struct {
		Cases []struct {
			Name    string
			Inputs  json.RawMessage
			Outputs json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []refCase
	for _, c := range doc.Cases {
		rc := refCase{Name: c.Name}
		rc.Inputs, rc.In = orderedValues(t, model, c.Inputs)
		rc.Outputs, rc.Out = orderedValues(t, model, c.Outputs)
		out = append(out, rc)
	}
	return out
}

func orderedValues(t testing.TB, model string, raw json.RawMessage) ([]string, []onnxrt.Value) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	var names []string
	var values []onnxrt.Value
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var file string
		if err := dec.Decode(&file); err != nil {
			t.Fatal(err)
		}
		names = append(names, k.(string))
		values = append(values, readValue(t, zoo(t, model, file)))
	}
	return names, values
}

func float32s(t testing.TB, v onnxrt.Value) []float32 {
	t.Helper()
	if v.Type != onnxrt.Float32 || len(v.Data)%4 != 0 {
		t.Fatalf("want float32 data, got %s with %d bytes", v.Type, len(v.Data))
	}
	out := make([]float32, len(v.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(v.Data[4*i:]))
	}
	return out
}

// assertClose fails unless got and want have one shape and their float32 elements differ by
// at most tolerance.Kernels.
func assertClose(t testing.TB, what string, got, want onnxrt.Value) {
	t.Helper()
	if !equalShape(got.Shape, want.Shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, want.Shape)
	}
	g, w := float32s(t, got), float32s(t, want)
	worst := 0.0
	for i := range w {
		d := math.Abs(float64(g[i]) - float64(w[i]))
		if !(d <= tolerance.Kernels) {
			t.Fatalf("%s: element %d is %g, want %g (difference %g over %g)", what, i, g[i], w[i], d, tolerance.Kernels)
		}
		worst = math.Max(worst, d)
	}
	t.Logf("%s: %d elements, worst difference %.2g", what, len(w), worst)
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// row is the i-th entry along v's first dimension, as a batch of one.
func row(v onnxrt.Value, i int) onnxrt.Value {
	n := len(v.Data) / int(v.Shape[0])
	shape := append([]int64{1}, v.Shape[1:]...)
	return onnxrt.Value{Type: v.Type, Shape: shape, Data: v.Data[i*n : (i+1)*n]}
}

func open(t testing.TB, path string, o onnxrt.Options) *onnxrt.Session {
	t.Helper()
	s, err := onnxrt.NewSession(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
