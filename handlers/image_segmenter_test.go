package handlers_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/torch"
)

// checkSegmentation compares one image's per-pixel answer, [H][W][class, p], with Python's
// (ref [H, W, 2] at offset off of ref_answer.npy): the class wherever Python's top two
// probabilities are 1e-4 apart or more, and every probability within 1e-4.
func checkSegmentation(t testing.TB, what string, got any, ref, margin []float32, off int) {
	t.Helper()
	rows, ok := got.([]any)
	if !ok || len(rows) != 224 {
		t.Fatalf("%s: not 224 rows", what)
	}
	var wrongClass, ties int
	worst := 0.0
	for y, r := range rows {
		cols := r.([]any)
		if len(cols) != 224 {
			t.Fatalf("%s: row %d has %d pixels", what, y, len(cols))
		}
		for x, c := range cols {
			px := c.([]any)
			i := off + y*224 + x
			class, p := px[0].(float64), px[1].(float64)
			worst = math.Max(worst, math.Abs(p-float64(ref[2*i+1])))
			if class != float64(ref[2*i]) {
				if margin[i] >= 1e-4 {
					wrongClass++
				} else {
					ties++
				}
			}
		}
	}
	t.Logf("%s: max |p - python| = %.3g; %d near-ties went the other way", what, worst, ties)
	if wrongClass > 0 || worst > 1e-4 {
		t.Errorf("%s: %d pixels of another class than Python's, max |p - python| = %g", what, wrongClass, worst)
	}
}

func segmenterRefs(t testing.TB) (scenes [][]byte, ref, margin []float32) {
	t.Helper()
	dir := filepath.Join("..", "models", "out", "segmenter")
	for _, name := range []string{"scene_320x240.png", "scene_200x300.png"} {
		img, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%v: run `make models` first", err)
		}
		scenes = append(scenes, img)
	}
	a, m := readNpyFile(t, filepath.Join(dir, "ref_answer.npy")), readNpyFile(t, filepath.Join(dir, "ref_margin.npy"))
	return scenes, logits(handlers.Tensor{Data: a.Data}), logits(handlers.Tensor{Data: m.Data})
}

// DeepLabV3 through image_segmenter answers as TorchServe's handler on Python's output: the
// "out" of its dict (beside "aux"), per pixel the class and its probability, for each scene
// alone, batched, and both in one request (a JSON array of the two).
func TestImageSegmenterMatchesTorchServe(t *testing.T) {
	h, m := zooHandler(t, "image_segmenter", "segmenter", "segmenter")
	scenes, ref, margin := segmenterRefs(t)
	var samples []*handlers.Sample
	for _, img := range scenes {
		s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", Data: img}}})
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s)
	}
	answer := func(s *handlers.Sample, out []handlers.Tensor) any {
		r, err := h.Postprocess(s, out)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatalf("%v: %.200s", err, r.Body)
		}
		return v
	}
	outs, err := handlers.Infer(h, m, samples)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		checkSegmentation(t, "batched", answer(s, outs[i]), ref, margin, i*224*224)
	}
	both, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "a", Data: scenes[0]}, {Name: "b", Data: scenes[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	outs, err = handlers.Infer(h, m, []*handlers.Sample{both})
	if err != nil {
		t.Fatal(err)
	}
	two := answer(both, outs[0]).([]any)
	if len(two) != 2 {
		t.Fatalf("two images: %d answers", len(two))
	}
	for i := range two {
		checkSegmentation(t, "one request", two[i], ref, margin, i*224*224)
	}
}

// A model whose output has no class scores is refused in TorchScript's terms, not Go's.
func TestImageSegmenterRefusals(t *testing.T) {
	h, _ := zooHandler(t, "image_segmenter", "segmenter", "segmenter")
	m, err := torch.Load(filepath.Join("..", "models", "out", "segmenter", "no_out.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = handlers.Infer(h, m, []*handlers.Sample{h.(handlers.Warmer).WarmupSample()})
	if err == nil || !strings.Contains(err.Error(), `the model returned Dict[str, Tensor]; a segmenter returns its class scores`) || strings.Contains(err.Error(), "interface") {
		t.Errorf("a dict without \"out\": %v", err)
	}
	// Class scores of the wrong rank are the model's error.
	if _, err := h.Postprocess(&handlers.Sample{Items: 1}, []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 4}, Data: make([]byte, 16)}}); err == nil || !strings.Contains(err.Error(), "[N, classes, H, W]") {
		t.Errorf("2-D output: %v", err)
	}
	if _, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", Data: []byte("GIF89a")}}}); !errors.Is(err, errkind.BadInput) {
		t.Errorf("truncated image: %v", err)
	}
}

func readNpyFile(t testing.TB, path string) npy.Array {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return a
}
