package zootest

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/npy"
)

// DigitsHeldOut reads the digits model's held-out PNGs under zoo (models/out/digits/heldout,
// named <index>_<label>.png) and their labels, in name order.
func DigitsHeldOut(t testing.TB, zoo string) ([][]byte, []string) {
	t.Helper()
	dir := filepath.Join(zoo, "digits", "heldout")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var imgs [][]byte
	var labels []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".png") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, b)
		labels = append(labels, strings.TrimSuffix(strings.SplitN(e.Name(), "_", 2)[1], ".png"))
	}
	return imgs, labels
}

// TextHeldOut reads the sentiment model's held-out sentences and their labels
// (models/out/textcls/heldout.json).
func TextHeldOut(t testing.TB, zoo string) ([]string, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zoo, "textcls", "heldout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Items []struct {
			Text  string `json:"text"`
			Label string `json:"label"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	var texts, labels []string
	for _, it := range h.Items {
		texts = append(texts, it.Text)
		labels = append(labels, it.Label)
	}
	return texts, labels
}

// ReadNpy decodes the .npy file at the path joined from parts.
func ReadNpy(t testing.TB, parts ...string) npy.Array {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// F32s reads little-endian float32s, an npy.Array's Data of dtype <f4.
func F32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
