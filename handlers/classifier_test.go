package handlers_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// zooHandler builds the named handler with models/configs/<config>.toml over the model of
// models/out/<zoo>.
func zooHandler(t testing.TB, name, zoo, config string) (handlers.Handler, *torch.Module) {
	t.Helper()
	dir := filepath.Join("..", "models", "out", zoo)
	m, err := torch.Load(filepath.Join(dir, "model.pt"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	t.Cleanup(func() { m.Close() })
	b, err := os.ReadFile(filepath.Join("..", "models", "configs", config+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := archive.ParseModelConfig(archive.ConfigTOML, b)
	if err != nil {
		t.Fatal(err)
	}
	h, err := handlers.New(name, handlers.Context{Config: cfg, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}

func logits(t handlers.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// checkBatchedEqualsAlone runs samples as one batch and one by one; the outputs agree
// within 1e-5.
func checkBatchedEqualsAlone(t *testing.T, h handlers.Handler, m *torch.Module, samples []*handlers.Sample) {
	t.Helper()
	batched, err := handlers.Infer(h, m, samples)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, s := range samples {
		alone, err := handlers.Infer(h, m, []*handlers.Sample{s})
		if err != nil {
			t.Fatal(err)
		}
		a, b := logits(alone[0][0]), logits(batched[i][0])
		if len(a) != len(b) {
			t.Fatalf("sample %d: %d values alone, %d batched", i, len(a), len(b))
		}
		for k := range a {
			worst = math.Max(worst, math.Abs(float64(a[k]-b[k])))
		}
	}
	t.Logf("%d samples: max |batched - alone| = %.3g", len(samples), worst)
	if worst > tolerance.Kernels {
		t.Fatalf("batched and one-by-one outputs differ by %.3g", worst)
	}
}

func digitPNGs(t *testing.T, n int) [][]byte {
	dir := filepath.Join("..", "models", "out", "digits", "heldout")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".png") && len(out) < n {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			out = append(out, b)
		}
	}
	return out
}

func TestImageClassifierBatchedEqualsAlone(t *testing.T) {
	h, m := zooHandler(t, "image_classifier", "digits", "digits")
	var samples []*handlers.Sample
	for _, png := range digitPNGs(t, 12) {
		s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/png", Data: png}}, Header: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s)
	}
	checkBatchedEqualsAlone(t, h, m, samples)
}

func TestTensorBatchedEqualsAlone(t *testing.T) {
	h, m := zooHandler(t, "tensor", "digits", "digits_tensor")
	b, err := os.ReadFile(filepath.Join("..", "models", "out", "digits", "heldout.npy"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := npy.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var samples []*handlers.Sample
	for i := range 12 {
		one, _ := npy.Encode(npy.Array{DType: "float32", Shape: []int64{1, 28, 28}, Data: all.Data[i*784*4 : (i+1)*784*4]})
		s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "application/x-npy", Data: one}}, Header: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s)
	}
	checkBatchedEqualsAlone(t, h, m, samples)
}

// Every bad tensor request is a 400 that says what was wrong.
func TestTensorRejectsBadInput(t *testing.T) {
	h, _ := zooHandler(t, "tensor", "digits", "digits_tensor")
	deep := strings.Repeat("[", 40) + "1" + strings.Repeat("]", 40)
	cases := map[string]string{
		"":                                  "empty",
		"not json":                          "invalid JSON",
		`[[1, 2], [3]]`:                     "ragged",
		`{"shape": [1]}`:                    `needs "data"`,
		`{"data": [1, 2], "shape": [3]}`:    "needs 3 values",
		`{"data": [1], "dtype": "complex"}`: "unknown dtype",
		`{"data": [1], "dtype": "float16"}`: "send .npy",
		`{"data": [1], "shape": [-1]}`:      "non-negative",
		`{"data": ["a"]}`:                   "number",
		`[1, 2, 3]`:                         "shape",
		deep:                                "deeper than 32",
		"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}": "npy",
	}
	for body, want := range cases {
		_, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", Data: []byte(body)}}, Header: func(string) string { return "" }})
		var he *handlers.Error
		if !errors.As(err, &he) || he.Kind != errkind.BadInput || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want a 400 mentioning %q", body, err, want)
		}
	}
}

// A one-channel model registered with the RGB defaults fails its first forward with a short
// message that names the option to set, not LibTorch's traceback; the opposite mistake names
// color = "rgb".
func TestImageChannelsMismatchNamesColor(t *testing.T) {
	m, err := torch.Load(filepath.Join("..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	defer m.Close()
	r18, err := torch.Load(filepath.Join("..", "models", "out", "resnet18", "model.pt"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	defer r18.Close()
	for _, tc := range []struct {
		name    string
		model   *torch.Module
		options map[string]any
		want    string
	}{
		{"image_classifier", m, map[string]any{}, `the model takes 1-channel images and this handler makes 3-channel ones: set color = "gray"`},
		{"image_segmenter", m, map[string]any{}, `set color = "gray"`},
		{"image_classifier", r18, map[string]any{"color": "gray"}, `the model takes 3-channel images and this handler makes 1-channel ones: set color = "rgb"`},
	} {
		h, err := handlers.New(tc.name, handlers.Context{Config: archive.ModelConfig{File: "model-config.toml", Handler: tc.name, Options: tc.options}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = handlers.Infer(h, tc.model, []*handlers.Sample{h.(handlers.Warmer).WarmupSample()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 300 {
			t.Errorf("%s %v: %v; want a short error containing %q", tc.name, tc.options, err, tc.want)
		}
		var te *torch.Error
		if !errors.As(err, &te) {
			t.Errorf("%s: %v no longer wraps LibTorch's error", tc.name, err)
		}
	}
}
