package vision_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/torchd/torchd/internal/tolerance"
)

// topK is one image's answer from an image classifier: labels in the response's order (by
// descending probability) and their probabilities.
type topK struct {
	labels []string
	probs  []float64
}

// effnetPhoto is one of models/out/efficientnet_lite0/images with the top-5 Python computed.
type effnetPhoto struct {
	name string
	img  []byte
	want topK
}

// effnetPhotos reads the photos and refs.json that models/efficientnet.py wrote, in name order.
func effnetPhotos(t testing.TB) []effnetPhoto {
	t.Helper()
	dir := filepath.Join(zooDir, "efficientnet_lite0")
	b, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Images map[string][][2]any `json:"images"`
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	var out []effnetPhoto
	for name, top := range refs.Images {
		img, err := os.ReadFile(filepath.Join(dir, "images", name))
		if err != nil {
			t.Fatal(err)
		}
		p := effnetPhoto{name: name, img: img}
		for _, lp := range top {
			p.want.labels = append(p.want.labels, lp[0].(string))
			p.want.probs = append(p.want.probs, lp[1].(float64))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b effnetPhoto) int { return cmp.Compare(a.name, b.name) })
	if len(out) == 0 {
		t.Fatal("refs.json has no photos")
	}
	return out
}

// readTopK reads one {label: probability, ...} object from dec, keeping the keys' order, which
// a Go map would lose.
func readTopK(dec *json.Decoder) (topK, error) {
	var k topK
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return k, fmt.Errorf("want '{', got %v (%v)", tok, err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return k, err
		}
		var p float64
		if err := dec.Decode(&p); err != nil {
			return k, err
		}
		k.labels = append(k.labels, tok.(string))
		k.probs = append(k.probs, p)
	}
	_, err := dec.Token() // '}'
	return k, err
}

// topKOf parses a 200 response for one image.
func topKOf(t testing.TB, r response) topK {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	k, err := readTopK(json.NewDecoder(bytes.NewReader(r.body)))
	if err != nil {
		t.Fatalf("top-k response %s: %v", r.body, err)
	}
	return k
}

// topKsOf parses a 200 response for several images: a JSON array of top-k objects.
func topKsOf(t testing.TB, r response) []topK {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		t.Fatalf("want an array, got %s", r.body)
	}
	var out []topK
	for dec.More() {
		k, err := readTopK(dec)
		if err != nil {
			t.Fatalf("top-k array %s: %v", r.body, err)
		}
		out = append(out, k)
	}
	return out
}

// sameTopK reports how got differs from want: other labels or another order, or a probability
// further than tol.
func sameTopK(got, want topK, tol float64) error {
	if !slices.Equal(got.labels, want.labels) {
		return fmt.Errorf("top-%d %q, want %q", len(want.labels), got.labels, want.labels)
	}
	for i := range want.probs {
		if d := math.Abs(got.probs[i] - want.probs[i]); d > tol {
			return fmt.Errorf("%q: probability %.9f, want %.9f (|diff| %.2g > %g)", want.labels[i], got.probs[i], want.probs[i], d, tol)
		}
	}
	return nil
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
	photos := effnetPhotos(t)

	alone := make([]topK, len(photos))
	var maxDiff float64
	for i, p := range photos {
		alone[i] = topKOf(t, do(t, "POST", u, "image/jpeg", p.img))
		if err := sameTopK(alone[i], p.want, 1e-4); err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		for j := range p.want.probs {
			maxDiff = max(maxDiff, math.Abs(alone[i].probs[j]-p.want.probs[j]))
		}
		t.Logf("%s: %q %.4f", p.name, alone[i].labels, alone[i].probs)
	}
	t.Logf("max |probability - Python's| over %d photos: %.2g", len(photos), maxDiff)
	// The weights are ImageNet's, not random: the photo of a Chinese palace comes out as one.
	if i := slices.IndexFunc(photos, func(p effnetPhoto) bool { return p.name == "china.jpg" }); i < 0 || alone[i].labels[0] != "palace" {
		t.Errorf("china.jpg: top-1 is not palace: %+v", alone[max(i, 0)])
	}

	// Batched answers may differ from one-by-one ones in the last float32 bits of the logits
	// (another batch size takes other kernels), far below 1e-5 in probability.
	const batchTol = tolerance.Kernels
	const rounds = 4
	batched := make([]topK, rounds*len(photos))
	forEach(len(batched), 16, func(i int) {
		batched[i] = topKOf(t, do(t, "POST", u, "image/jpeg", photos[i%len(photos)].img))
	})
	for i, k := range batched {
		if err := sameTopK(k, alone[i%len(photos)], batchTol); err != nil {
			t.Errorf("%s, concurrent request %d: %v", photos[i%len(photos)].name, i, err)
		}
	}
	if _, mean := s.batching(t, "efficientnet_lite0"); mean <= 1.05 {
		t.Errorf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for _, p := range photos {
		fw, err := w.CreateFormFile("data", p.name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(p.img)
	}
	w.Close()
	all := topKsOf(t, do(t, "POST", u, w.FormDataContentType(), mp.Bytes()))
	if len(all) != len(photos) {
		t.Fatalf("%d images in one multipart request: %d answers", len(photos), len(all))
	}
	for i, k := range all {
		if err := sameTopK(k, alone[i], batchTol); err != nil {
			t.Errorf("%s, image %d of a multipart request: %v", photos[i].name, i, err)
		}
	}
}
