package text_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/torchd/torchd/handlers/text"
)

// zoo returns the path of a file of models/out/textcls, which models/textcls.py writes.
func zoo(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "models", "out", "textcls", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	return p
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// heldOut is models/out/textcls/heldout.json: the held-out sentences with the ids the
// Python tokenizer that trained the model gave them.
type heldOut struct {
	MaxLength int  `json:"max_length"`
	Lowercase bool `json:"lowercase"`
	Items     []struct {
		Text  string  `json:"text"`
		Label string  `json:"label"`
		IDs   []int64 `json:"ids"`
	} `json:"items"`
}

func loadZoo(t testing.TB) (*text.WordPiece, heldOut) {
	t.Helper()
	var h heldOut
	readJSON(t, zoo(t, "heldout.json"), &h)
	w, err := text.Load(zoo(t, "vocab.txt"), text.Options{Lowercase: h.Lowercase, MaxLength: h.MaxLength})
	if err != nil {
		t.Fatal(err)
	}
	return w, h
}

// Every held-out sentence gets the ids the model was trained with.
func TestTokenizerMatchesPythonOnHeldOut(t *testing.T) {
	w, h := loadZoo(t)
	if len(h.Items) == 0 {
		t.Fatal("heldout.json has no items")
	}
	truncated := 0
	for i, it := range h.Items {
		if got := w.Encode(it.Text); !slices.Equal(got, it.IDs) {
			t.Errorf("sentence %d %q:\n Go     %v\n Python %v", i, it.Text, got, it.IDs)
		}
		if len(it.IDs) == h.MaxLength {
			truncated++
		}
	}
	t.Logf("%d held-out sentences, %d of them at max_length %d", len(h.Items), truncated, h.MaxLength)
}

// The edge cases of tokenizer_refs.json: accents, CJK, control characters, Greek final sigma,
// long words, truncation, with the training vocabulary.
func TestTokenizeMatchesPythonOnEdgeCases(t *testing.T) {
	w, _ := loadZoo(t)
	var refs []struct {
		Text   string   `json:"text"`
		Tokens []string `json:"tokens"`
		IDs    []int64  `json:"ids"`
	}
	readJSON(t, zoo(t, "tokenizer_refs.json"), &refs)
	for _, r := range refs {
		if got := w.Tokenize(r.Text); !slices.Equal(got, r.Tokens) && !(len(got) == 0 && len(r.Tokens) == 0) {
			t.Errorf("Tokenize(%q):\n Go     %q\n Python %q", r.Text, got, r.Tokens)
		}
		if got := w.Encode(r.Text); !slices.Equal(got, r.IDs) {
			t.Errorf("Encode(%q):\n Go     %v\n Python %v", r.Text, got, r.IDs)
		}
	}
}
