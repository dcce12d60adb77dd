package vision_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/npy"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The scripted torchvision detector and segmenter of models/detector.py and segmenter.py,
// behind object_detector and image_segmenter, answer over HTTP and gRPC (TorchServe's APIs
// and KServe v2, kservev2_served_test.go) as TorchServe's handlers do on Python's outputs.

// startVisionServer starts a server and registers name: the detector's or the segmenter's
// archive, written as a directory (deflating 116 MB would slow every run).
func startVisionServer(t *testing.T, name string) *server {
	t.Helper()
	var extra []string
	if p := filepath.Join(zooDir, name, "index_to_name.json"); fileExists(p) {
		extra = append(extra, p)
	}
	dir, err := archive.Write(archive.WriteOptions{
		ModelName: name, Version: "1.0", Format: archive.FormatNoArchive,
		SerializedFile: filepath.Join(zooDir, name, "model.pt"), ExtraFiles: extra,
		ConfigFile: filepath.Join("..", "..", "models", "configs", name+".toml"), ExportPath: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	s := startServer(t)
	s.register(t, "url="+url.QueryEscape(dir)+"&batch_size=4&max_batch_delay=5&initial_workers=1&synchronous=true")
	return s
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// visionScenes reads a zoo directory's two scenes, in ref order.
func visionScenes(t testing.TB, zoo string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, name := range []string{"scene_320x240.png", "scene_200x300.png"} {
		b, err := os.ReadFile(filepath.Join(zooDir, zoo, name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// multipartImages is a request of several images, one form file each.
func multipartImages(t testing.TB, imgs [][]byte) (string, []byte) {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for i, img := range imgs {
		f, err := w.CreateFormFile("data", "scene"+string(rune('a'+i))+".png")
		if err != nil {
			t.Fatal(err)
		}
		f.Write(img)
	}
	w.Close()
	return w.FormDataContentType(), body.Bytes()
}

// sameDetections compares one image's answer with TorchServe's on Python's output: the same
// labels in the same order, boxes within 0.01 px, scores within 1e-4 (models/detector.py
// keeps every score 1e-4 or more from the threshold and from its neighbours' by 1e-5).
func sameDetections(t testing.TB, what string, body []byte, want []any) {
	t.Helper()
	var got []map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d detections, want Python's %d: %s", what, len(got), len(want), body)
	}
	for i, w := range want {
		w := w.(map[string]any)
		for k, wv := range w {
			gv, ok := got[i][k]
			if !ok || len(got[i]) != 2 {
				t.Fatalf("%s: detection %d is %v, want %v", what, i, got[i], w)
			}
			if k == "score" {
				if math.Abs(gv.(float64)-wv.(float64)) > 1e-4 {
					t.Errorf("%s: detection %d: score %v, want %v", what, i, gv, wv)
				}
				continue
			}
			for j, c := range wv.([]any) {
				if math.Abs(gv.([]any)[j].(float64)-c.(float64)) > 0.01 {
					t.Errorf("%s: detection %d (%s): box %v, want %v", what, i, k, gv, wv)
					break
				}
			}
		}
	}
}

func TestObjectDetectorOverHTTPAndGRPC(t *testing.T) {
	gate(t)
	s := startVisionServer(t, "detector")
	b, err := os.ReadFile(filepath.Join(zooDir, "detector", "ref_answers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs map[string]any
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	scenes := visionScenes(t, "detector")
	names := []string{"scene_320x240.png", "scene_200x300.png"}
	u := s.inf + "/predictions/detector"
	tsc := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
	for i, img := range scenes {
		r := do(t, "POST", u, "image/png", img)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", names[i], r.status, r.body)
		}
		sameDetections(t, "HTTP "+names[i], r.body, refs[names[i]].([]any))
		p, err := tsc.Predictions(callCtx(t), &tspb.PredictionsRequest{ModelName: "detector", Input: map[string][]byte{"data": img}})
		if err != nil {
			t.Fatal(err)
		}
		sameDetections(t, "gRPC "+names[i], p.GetPrediction(), refs[names[i]].([]any))
	}
	// Both scenes, of different sizes, in one request: one forward, as Python's "batch".
	ct, body := multipartImages(t, scenes)
	r := do(t, "POST", u, ct, body)
	var both []json.RawMessage
	if r.status != 200 || json.Unmarshal(r.body, &both) != nil || len(both) != 2 {
		t.Fatalf("two images: %d %s", r.status, r.body)
	}
	for i := range both {
		sameDetections(t, "HTTP batch "+names[i], both[i], refs["batch"].([]any)[i].([]any))
	}
	// Not an image: the client's error, over both protocols.
	if r := do(t, "POST", u, "image/png", []byte("not an image")); r.status != 400 || !bytes.Contains(r.body, []byte("unrecognised leading bytes")) {
		t.Errorf("not an image: %d %s", r.status, r.body)
	}
	_, err = tsc.Predictions(callCtx(t), &tspb.PredictionsRequest{ModelName: "detector", Input: map[string][]byte{"data": []byte("not an image")}})
	wantCode(t, err, codes.InvalidArgument, "unrecognised leading bytes")
	t.Run("KServe v2", func(t *testing.T) { detectorOverKServeV2(t, s, refs) })
}

// sameSegmentation compares one image's [224][224][class, p] answer with Python's (ref
// [N, 224, 224, 2] from offset off): the class where Python's top two probabilities are 1e-4
// apart or more, every probability within 1e-4.
func sameSegmentation(t testing.TB, what string, body []byte, ref, margin []float32, off int) {
	t.Helper()
	var got [][][2]float64
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%s: %v: %.200s", what, err, body)
	}
	if len(got) != 224 || len(got[0]) != 224 {
		t.Fatalf("%s: %d rows, want 224 of 224 pixels", what, len(got))
	}
	var wrong int
	worst := 0.0
	for y, row := range got {
		for x, px := range row {
			i := off + y*224 + x
			worst = math.Max(worst, math.Abs(px[1]-float64(ref[2*i+1])))
			if px[0] != float64(ref[2*i]) && margin[i] >= 1e-4 {
				wrong++
			}
		}
	}
	if wrong > 0 || worst > 1e-4 {
		t.Errorf("%s: %d pixels of another class than Python's, max |p - python| = %g", what, wrong, worst)
	}
}

func float32sOf(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil || a.DType != "float32" {
		t.Fatalf("%s: %v %s", path, err, a.DType)
	}
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out
}

func TestImageSegmenterOverHTTPAndGRPC(t *testing.T) {
	gate(t)
	s := startVisionServer(t, "segmenter")
	ref := float32sOf(t, filepath.Join(zooDir, "segmenter", "ref_answer.npy"))
	margin := float32sOf(t, filepath.Join(zooDir, "segmenter", "ref_margin.npy"))
	scenes := visionScenes(t, "segmenter")
	u := s.inf + "/predictions/segmenter"
	tsc := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
	for i, img := range scenes {
		r := do(t, "POST", u, "image/png", img)
		if r.status != 200 {
			t.Fatalf("scene %d: %d %.300s", i, r.status, r.body)
		}
		sameSegmentation(t, "HTTP", r.body, ref, margin, i*224*224)
		p, err := tsc.Predictions(callCtx(t), &tspb.PredictionsRequest{ModelName: "segmenter", Input: map[string][]byte{"data": img}})
		if err != nil {
			t.Fatal(err)
		}
		sameSegmentation(t, "gRPC", p.GetPrediction(), ref, margin, i*224*224)
	}
	ct, body := multipartImages(t, scenes)
	r := do(t, "POST", u, ct, body)
	var both []json.RawMessage
	if r.status != 200 || json.Unmarshal(r.body, &both) != nil || len(both) != 2 {
		t.Fatalf("two images: %d %.300s", r.status, r.body)
	}
	for i := range both {
		sameSegmentation(t, "HTTP, both in one request", both[i], ref, margin, i*224*224)
	}
	if r := do(t, "POST", u, "image/png", []byte("\x89PNG\r\n\x1a\n")); r.status != 400 {
		t.Errorf("truncated PNG: %d %s", r.status, r.body)
	}
	t.Run("KServe v2", func(t *testing.T) { segmenterOverKServeV2(t, s, ref, margin) })
}
