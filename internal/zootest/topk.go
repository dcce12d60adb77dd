// Package zootest reads the zoo's reference answers (models/out, written by models/*.py) for
// the tests of the packages that serve the zoo's models. Production code must not import it.
package zootest

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

// TopK is one image's answer from an image classifier: labels in the response's order (by
// descending probability) and their probabilities.
type TopK struct {
	Labels []string
	Probs  []float64
}

// Photo is one of the zoo's EfficientNet-Lite0 photos with the top-5 Python computed.
type Photo struct {
	Name string
	Img  []byte
	Want TopK
}

// EffnetPhotos reads the photos and refs.json that models/efficientnet.py wrote under zoo
// (models/out), in name order.
func EffnetPhotos(t testing.TB, zoo string) []Photo {
	t.Helper()
	dir := filepath.Join(zoo, "efficientnet_lite0")
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
	var out []Photo
	for name, top := range refs.Images {
		img, err := os.ReadFile(filepath.Join(dir, "images", name))
		if err != nil {
			t.Fatal(err)
		}
		p := Photo{Name: name, Img: img}
		for _, lp := range top {
			p.Want.Labels = append(p.Want.Labels, lp[0].(string))
			p.Want.Probs = append(p.Want.Probs, lp[1].(float64))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Photo) int { return cmp.Compare(a.Name, b.Name) })
	if len(out) == 0 {
		t.Fatal("refs.json has no photos")
	}
	return out
}

// ReadTopK reads one {label: probability, ...} object from dec, keeping the keys' order, which
// a Go map would lose.
func ReadTopK(dec *json.Decoder) (TopK, error) {
	var k TopK
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
		k.Labels = append(k.Labels, tok.(string))
		k.Probs = append(k.Probs, p)
	}
	_, err := dec.Token() // '}'
	return k, err
}

// TopKOf parses a 200 answer for one image.
func TopKOf(t testing.TB, status int, body []byte) TopK {
	t.Helper()
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	k, err := ReadTopK(json.NewDecoder(bytes.NewReader(body)))
	if err != nil {
		t.Fatalf("top-k response %s: %v", body, err)
	}
	return k
}

// TopKsOf parses a 200 answer for several images: a JSON array of top-k objects.
func TopKsOf(t testing.TB, status int, body []byte) []TopK {
	t.Helper()
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		t.Fatalf("want an array, got %s", body)
	}
	var out []TopK
	for dec.More() {
		k, err := ReadTopK(dec)
		if err != nil {
			t.Fatalf("top-k array %s: %v", body, err)
		}
		out = append(out, k)
	}
	return out
}

// SameTopK reports how got differs from want: other labels or another order, or a probability
// further than tol.
func SameTopK(got, want TopK, tol float64) error {
	if !slices.Equal(got.Labels, want.Labels) {
		return fmt.Errorf("top-%d %q, want %q", len(want.Labels), got.Labels, want.Labels)
	}
	for i := range want.Probs {
		if d := math.Abs(got.Probs[i] - want.Probs[i]); d > tol {
			return fmt.Errorf("%q: probability %.9f, want %.9f (|diff| %.2g > %g)", want.Labels[i], got.Probs[i], want.Probs[i], d, tol)
		}
	}
	return nil
}

// Top1 is the first label of an image classifier's TorchServe answer, a top-k object in
// descending order; "" if the body is not one.
func Top1(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	t, err := dec.Token()
	if err != nil {
		return ""
	}
	s, _ := t.(string)
	return s
}
