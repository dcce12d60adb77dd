package libtorch_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
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
