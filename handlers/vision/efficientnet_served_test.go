package vision_test

import (
	"bytes"
	"math"
	"mime/multipart"
	"slices"
	"testing"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/internal/zootest"
)

func topKOf(t testing.TB, r response) zootest.TopK {
	t.Helper()
	return zootest.TopKOf(t, r.status, r.body)
}

// The ImageNet EfficientNet-Lite0 through HTTP answers every real JPEG (scikit-learn's two
// photos and JPEGs made from them: crops, rotations, EXIF orientation, gray, progressive,
// 4:4:4, 180x120 to 4032x3024, each decoded at full size as PIL decodes it) with Python's
// top-5, in order, within 1e-4; and batched requests, concurrent or several images in one
// multipart request, get the answers they get one by one.
func TestEfficientNetLite0MatchesPython(t *testing.T) {
	gate(t)
	s := startServer(t)
	s.register(t, "url=efficientnet_lite0.mar&batch_size=8&max_batch_delay=20&initial_workers=1&synchronous=true")
	u := s.inf + "/predictions/efficientnet_lite0"
	photos := zootest.EffnetPhotos(t, zooDir)

	alone := make([]zootest.TopK, len(photos))
	var maxDiff float64
	for i, p := range photos {
		alone[i] = topKOf(t, do(t, "POST", u, "image/jpeg", p.Img))
		if err := zootest.SameTopK(alone[i], p.Want, 1e-4); err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		for j := range p.Want.Probs {
			maxDiff = max(maxDiff, math.Abs(alone[i].Probs[j]-p.Want.Probs[j]))
		}
		t.Logf("%s: %q %.4f", p.Name, alone[i].Labels, alone[i].Probs)
	}
	t.Logf("max |probability - Python's| over %d photos: %.2g", len(photos), maxDiff)
	// The weights are ImageNet's, not random: the photo of a Chinese palace comes out as one.
	if i := slices.IndexFunc(photos, func(p zootest.Photo) bool { return p.Name == "china.jpg" }); i < 0 || alone[i].Labels[0] != "palace" {
		t.Errorf("china.jpg: top-1 is not palace: %+v", alone[max(i, 0)])
	}

	// Batched answers may differ from one-by-one ones in the last float32 bits of the logits
	// (another batch size takes other kernels), far below 1e-5 in probability.
	const batchTol = tolerance.Kernels
	const rounds = 4
	batched := make([]zootest.TopK, rounds*len(photos))
	forEach(len(batched), 16, func(i int) {
		batched[i] = topKOf(t, do(t, "POST", u, "image/jpeg", photos[i%len(photos)].Img))
	})
	for i, k := range batched {
		if err := zootest.SameTopK(k, alone[i%len(photos)], batchTol); err != nil {
			t.Errorf("%s, concurrent request %d: %v", photos[i%len(photos)].Name, i, err)
		}
	}
	if _, mean := s.batching(t, "efficientnet_lite0"); mean <= 1.05 {
		t.Errorf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for _, p := range photos {
		fw, err := w.CreateFormFile("data", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(p.Img)
	}
	w.Close()
	r := do(t, "POST", u, w.FormDataContentType(), mp.Bytes())
	all := zootest.TopKsOf(t, r.status, r.body)
	if len(all) != len(photos) {
		t.Fatalf("%d images in one multipart request: %d answers", len(photos), len(all))
	}
	for i, k := range all {
		if err := zootest.SameTopK(k, alone[i], batchTol); err != nil {
			t.Errorf("%s, image %d of a multipart request: %v", photos[i].Name, i, err)
		}
	}
}
