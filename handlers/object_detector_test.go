package handlers_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// detectorRefs reads models/out/detector's scenes and ref_answers.json: TorchServe's
// object_detector postprocess applied to Python's output, per scene alone and for both
// scenes in one forward ("batch").
func detectorRefs(t testing.TB) (scenes [][]byte, alone [][]any, batch []any) {
	t.Helper()
	dir := filepath.Join("..", "models", "out", "detector")
	b, err := os.ReadFile(filepath.Join(dir, "ref_answers.json"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	var refs map[string]any
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scene_320x240.png", "scene_200x300.png"} {
		img, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		scenes = append(scenes, img)
		alone = append(alone, refs[name].([]any))
	}
	return scenes, alone, refs["batch"].([]any)
}

// checkDetections compares one image's answer with Python's: the same labels in the same
// order, boxes within 0.01 px and scores within 1e-4 (models/detector.py keeps every score
// 1e-4 or more from the threshold).
func checkDetections(t testing.TB, what string, got, want []any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d detections, want Python's %d\ngot %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range want {
		g, w := got[i].(map[string]any), want[i].(map[string]any)
		if len(g) != 2 || len(w) != 2 {
			t.Fatalf("%s: detection %d is %v, want {label: box, \"score\": s} like %v", what, i, g, w)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				t.Fatalf("%s: detection %d is %v, want the key %q (%v)", what, i, g, k, w)
			}
			if k == "score" {
				if d := math.Abs(gv.(float64) - wv.(float64)); d > 1e-4 {
					t.Errorf("%s: detection %d: score %v, want %v", what, i, gv, wv)
				}
				continue
			}
			gb, wb := gv.([]any), wv.([]any)
			if len(gb) != 4 {
				t.Fatalf("%s: detection %d: box %v", what, i, gv)
			}
			for j := range 4 {
				if d := math.Abs(gb[j].(float64) - wb[j].(float64)); d > 0.01 {
					t.Errorf("%s: detection %d (%s): box %v, want %v", what, i, k, gb, wb)
					break
				}
			}
		}
	}
}

func detectorHandler(t testing.TB, options string) handlers.Handler {
	t.Helper()
	cfg, err := archive.ParseModelConfig(archive.ConfigTOML, []byte("handler = \"object_detector\"\n[options]\n"+options))
	if err != nil {
		t.Fatal(err)
	}
	h, err := handlers.New("object_detector", handlers.Context{Config: cfg, Labels: map[int]string{1: "circle", 2: "square"}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The scripted Faster R-CNN through object_detector answers as TorchServe's handler does on
// Python's output: each scene alone, and both scenes of different sizes in one forward (whose
// answers differ from the scenes alone, as in Python: torchvision pads a batch to its largest
// image).
func TestObjectDetectorMatchesTorchServe(t *testing.T) {
	_, m := zooHandler(t, "object_detector", "detector", "detector")
	labels, err := os.ReadFile(filepath.Join("..", "models", "out", "detector", "index_to_name.json"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := archive.ParseLabels("index_to_name.json", labels)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := archive.ParseModelConfig(archive.ConfigTOML, []byte("handler = \"object_detector\"\n"))
	h, err := handlers.New("object_detector", handlers.Context{Config: cfg, Labels: names})
	if err != nil {
		t.Fatal(err)
	}
	scenes, alone, batch := detectorRefs(t)
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
			t.Fatalf("%v: %s", err, r.Body)
		}
		return v
	}
	for i, s := range samples {
		outs, err := handlers.Infer(h, m, []*handlers.Sample{s})
		if err != nil {
			t.Fatal(err)
		}
		checkDetections(t, "alone", answer(s, outs[0]).([]any), alone[i])
	}
	// Two requests in one batch, then one request of both images.
	outs, err := handlers.Infer(h, m, samples)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		checkDetections(t, "batched", answer(s, outs[i]).([]any), batch[i].([]any))
	}
	both, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "a", Data: scenes[0]}, {Name: "b", Data: scenes[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	outs, err = handlers.Infer(h, m, []*handlers.Sample{both})
	if err != nil {
		t.Fatal(err)
	}
	got := answer(both, outs[0]).([]any)
	if len(got) != 2 {
		t.Fatalf("two images: %d answers", len(got))
	}
	for i := range got {
		checkDetections(t, "one request", got[i].([]any), batch[i].([]any))
	}
}

// detectionOutputs is one image's detector output: boxes, labels and scores.
func detectionOutputs(boxes []float32, labels []int64, scores []float32) []handlers.Tensor {
	k := int64(len(scores))
	b := make([]byte, 4*len(boxes))
	for i, v := range boxes {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	l := make([]byte, 8*len(labels))
	for i, v := range labels {
		binary.LittleEndian.PutUint64(l[8*i:], uint64(v))
	}
	s := make([]byte, 4*len(scores))
	for i, v := range scores {
		binary.LittleEndian.PutUint32(s[4*i:], math.Float32bits(v))
	}
	return []handlers.Tensor{{DType: torch.Float32, Shape: []int64{k, 4}, Data: b}, {DType: torch.Int64, Shape: []int64{k}, Data: l}, {DType: torch.Float32, Shape: []int64{k}, Data: s}}
}

// The threshold keeps scores at or above it (a NaN never), labels come from the archive's
// index_to_name.json or are the class number, and the JSON is TorchServe's.
func TestObjectDetectorAnswer(t *testing.T) {
	h := detectorHandler(t, "threshold = 0.6\n")
	out := detectionOutputs([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 0, 0, 1, 1}, []int64{2, 7, 1, 1}, []float32{0.9, 0.6, float32(math.NaN()), 0.59})
	r, err := h.Postprocess(&handlers.Sample{Items: 1}, out)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	if len(got) != 2 || got[0]["square"] == nil || got[0]["score"].(float64) < 0.89 || got[1]["7"] == nil {
		t.Errorf("answer %s", r.Body)
	}
	if !strings.HasPrefix(string(r.Body), "[\n  {\n    \"square\": [\n      1.00000000e+00,") {
		t.Errorf("not indented as TorchServe's json.dumps(indent=2):\n%s", r.Body)
	}
	// Nothing over the threshold: an empty list; two images: a list of lists.
	none := detectionOutputs(nil, nil, nil)
	r, err = h.Postprocess(&handlers.Sample{Items: 2}, append(out, none...))
	if err != nil {
		t.Fatal(err)
	}
	var two [][]map[string]any
	if err := json.Unmarshal(r.Body, &two); err != nil || len(two) != 2 || len(two[0]) != 2 || len(two[1]) != 0 {
		t.Errorf("two images: %v %s", err, r.Body)
	}
	// A kept box that is not finite is the model's error, not invalid JSON.
	bad := detectionOutputs([]float32{float32(math.Inf(1)), 0, 1, 1}, []int64{1}, []float32{0.9})
	if _, err := h.Postprocess(&handlers.Sample{Items: 1}, bad); err == nil || !strings.Contains(err.Error(), "box of +Inf") {
		t.Errorf("infinite box: %v", err)
	}
}

// Options are checked when the model is registered.
func TestObjectDetectorOptions(t *testing.T) {
	for options, want := range map[string]string{
		"threshold = 1.5\n":                   "option threshold must be a score from 0 to 1, got 1.5",
		"threshold = \"high\"\n":              "must be a number",
		"mean = [0.5]\nstd = [0.5]\n":         "options mean and std need 3 values",
		"mean = [0, 0, 0]\nstd = [1, 0, 1]\n": "option std has a zero",
		"max_images = 0\n":                    "option max_images must be ≥ 1",
	} {
		cfg, err := archive.ParseModelConfig(archive.ConfigTOML, []byte("handler = \"object_detector\"\n[options]\n"+options))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := handlers.New("object_detector", handlers.Context{Config: cfg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", options, err, want)
		}
	}
}

// The detector's default limits are lower than image_classifier's (its tensor is the whole
// image): 12 Mpx an image, 48 Mpx a request, both refused from the headers.
func TestObjectDetectorLimits(t *testing.T) {
	h := detectorHandler(t, "")
	one := func(imgs ...[]byte) error {
		var in []handlers.Payload
		for _, img := range imgs {
			in = append(in, handlers.Payload{Name: "data", Data: img})
		}
		_, err := h.Preprocess(&handlers.Request{Inputs: in})
		return err
	}
	if err := one(pngHeader(4000, 3001)); !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "over the limit of 12000000 pixels") {
		t.Errorf("a 12-Mpx image: %v", err)
	}
	ten := pngHeader(3000, 3334)
	if err := one(ten, ten, ten, ten, ten); !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "at most 48000000 per request (max_request_pixels)") {
		t.Errorf("five 10-Mpx images: %v", err)
	}
	h = detectorHandler(t, "max_pixels = 20_000_000\n")
	if err := one(pngHeader(4000, 3001)); err == nil || strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a 12-Mpx image under max_pixels = 20 M: %v", err)
	}
}

// Bad input is the client's error; a model that is no detector is named in TorchScript's
// terms, not Go's.
func TestObjectDetectorRefusals(t *testing.T) {
	h := detectorHandler(t, "")
	if _, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", Data: []byte("not an image")}}}); !errors.Is(err, errkind.BadInput) {
		t.Errorf("not an image: %v", err)
	}
	tp := h.(handlers.TensorPreprocessor)
	if _, err := tp.PreprocessTensor(handlers.Tensor{DType: torch.Int64, Shape: []int64{3, 4, 4}, Data: make([]byte, 8*48)}); !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "float32 images") {
		t.Errorf("int64 tensor: %v", err)
	}
	s, err := tp.PreprocessTensor(handlers.Tensor{DType: torch.Float32, Shape: []int64{2, 3, 4, 5}, Data: make([]byte, 4*120)})
	if err != nil || s.Items != 2 || len(s.Tensors) != 2 {
		t.Fatalf("two images as a tensor: %v %+v", err, s)
	}
	// A model of List[Tensor] that returns a dict of tensors, not detections.
	m, err := torch.Load(filepath.Join("..", "models", "out", "detector", "not_a_detector.pt"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	defer m.Close()
	_, err = handlers.Infer(h, m, []*handlers.Sample{s})
	if err == nil || !strings.Contains(err.Error(), "the model returned Dict[str, Tensor]; a detector returns") || strings.Contains(err.Error(), "interface") {
		t.Errorf("not a detector: %v", err)
	}
	// A sample made of a tensor of images (a KServe v2 request's) runs as its images.
	raw := &handlers.Sample{Items: 2, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{2, 3, 4, 5}, Data: make([]byte, 4*120)}}}
	if _, err := handlers.Infer(h, m, []*handlers.Sample{raw}); err == nil || !strings.Contains(err.Error(), "the model returned Dict[str, Tensor]") {
		t.Errorf("images as one tensor: %v", err)
	}
	raw.Tensors[0].DType = torch.Int32
	if _, err := handlers.Infer(h, m, []*handlers.Sample{raw}); !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "takes float32 images") {
		t.Errorf("int32 images: %v", err)
	}
}
