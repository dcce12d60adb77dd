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

// Every text of models/out/minilm/tokenizer_refs.json (models/minilm.py) gets the ids that
// all-MiniLM-L6-v2's own Hugging Face tokenizer gives it, truncation at max_length included.
func TestTokenizerMatchesHFOnMiniLM(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "out", "minilm")
	var refs struct {
		MaxLength int `json:"max_length"`
		Items     []struct {
			Text string  `json:"text"`
			IDs  []int64 `json:"ids"`
		} `json:"items"`
	}
	readJSON(t, filepath.Join(dir, "tokenizer_refs.json"), &refs)
	w, err := text.Load(filepath.Join(dir, "vocab.txt"), text.Options{Lowercase: true, MaxLength: refs.MaxLength, HuggingFace: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs.Items) < 1000 {
		t.Fatalf("tokenizer_refs.json has %d texts, want 1000 or more", len(refs.Items))
	}
	bad, truncated := 0, 0
	for i, it := range refs.Items {
		if got := w.Encode(it.Text); !slices.Equal(got, it.IDs) {
			bad++
			if bad <= 20 {
				t.Errorf("text %d %+q:\n Go %v\n HF %v", i, it.Text, got, it.IDs)
			}
		}
		if len(it.IDs) == refs.MaxLength {
			truncated++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d texts differ", bad, len(refs.Items))
	}
	t.Logf("%d texts, %d of them cut at max_length %d", len(refs.Items), truncated, refs.MaxLength)
}
