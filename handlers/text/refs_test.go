package text_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A Hugging Face tokenizer.json read as it is (models/hfbert.py copies all-MiniLM-L6-v2's)
// gives the ids of the fast tokenizer on every text of models/out/hfbert/tokenizer_refs.json,
// special tokens written in the text ([SEP], [MASK], ...), accents, CJK and emoji included.
func TestTokenizerJSONMatchesHF(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "out", "hfbert")
	var refs struct {
		MaxLength int `json:"max_length"`
		Items     []struct {
			Text string  `json:"text"`
			IDs  []int64 `json:"ids"`
		} `json:"items"`
	}
	readJSON(t, filepath.Join(dir, "tokenizer_refs.json"), &refs)
	f, err := os.Open(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := text.ReadTokenizerJSON(f, text.Options{MaxLength: refs.MaxLength})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs.Items) < 1000 {
		t.Fatalf("tokenizer_refs.json has %d texts, want 1000 or more", len(refs.Items))
	}
	bad, special := 0, 0
	for i, it := range refs.Items {
		if got := w.Encode(it.Text); !slices.Equal(got, it.IDs) {
			bad++
			if bad <= 20 {
				t.Errorf("text %d %+q:\n Go %v\n HF %v", i, it.Text, got, it.IDs)
			}
		}
		if strings.Contains(it.Text, "[SEP]") || strings.Contains(it.Text, "[MASK]") {
			special++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d texts differ", bad, len(refs.Items))
	}
	if special == 0 {
		t.Fatal("no text spells out a special token")
	}
	t.Logf("%d texts, %d with special tokens written in them", len(refs.Items), special)
}

// A byte-level BPE tokenizer.json made as RoBERTa's is (models/hfbert.py trains one) gives the
// ids of Hugging Face's tokenizers on every text of models/out/hfbert/tokenizer_bpe_refs.json:
// <s>, </s> and <mask> (which takes the whitespace before it) written in the text,
// contractions, runs of whitespace, accents, CJK, emoji, and truncation at max_length. So does
// its variant with add_prefix_space, NFC, a TemplateProcessing post-processor and added
// tokens with single_word, lstrip and rstrip.
func TestBPETokenizerJSONMatchesHF(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "out", "hfbert")
	var refs struct {
		MaxLength int `json:"max_length"`
		Items     []struct {
			Text       string  `json:"text"`
			IDs        []int64 `json:"ids"`
			VariantIDs []int64 `json:"variant_ids"`
		} `json:"items"`
	}
	readJSON(t, filepath.Join(dir, "tokenizer_bpe_refs.json"), &refs)
	if len(refs.Items) < 1000 {
		t.Fatalf("tokenizer_bpe_refs.json has %d texts, want 1000 or more", len(refs.Items))
	}
	for _, c := range []struct {
		file string
		ids  func(i int) []int64
	}{
		{"tokenizer_bpe.json", func(i int) []int64 { return refs.Items[i].IDs }},
		{"tokenizer_bpe_variant.json", func(i int) []int64 { return refs.Items[i].VariantIDs }},
	} {
		f, err := os.Open(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := text.ReadTokenizerJSON(f, text.Options{MaxLength: refs.MaxLength})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tok.(*text.BPE); !ok {
			t.Fatalf("%s read as %T, want a BPE", c.file, tok)
		}
		bad, special, truncated := 0, 0, 0
		for i, it := range refs.Items {
			want := c.ids(i)
			if got := tok.Encode(it.Text); !slices.Equal(got, want) {
				bad++
				if bad <= 20 {
					t.Errorf("%s: text %d %+q:\n Go %v\n HF %v", c.file, i, it.Text, got, want)
				}
			}
			for _, s := range []string{"<s>", "</s>", "<mask>", "[SEP]", "[MASK]"} {
				if strings.Contains(it.Text, s) {
					special++
					break
				}
			}
			if len(want) == refs.MaxLength {
				truncated++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d texts differ", c.file, bad, len(refs.Items))
		}
		if special == 0 || truncated == 0 {
			t.Fatalf("%s: %d texts spell out a special token and %d are cut at max_length: want some of each", c.file, special, truncated)
		}
		t.Logf("%s: %d texts, %d with special tokens written in them, %d cut at max_length %d", c.file, len(refs.Items), special, truncated, refs.MaxLength)
	}
}

// What ReadTokenizerJSON refuses, with messages that say why.
func TestTokenizerJSONRefusals(t *testing.T) {
	bpe, err := os.ReadFile(filepath.Join("..", "..", "models", "out", "hfbert", "tokenizer_bpe.json"))
	if err != nil {
		t.Fatal(err)
	}
	// edit returns the BPE tokenizer.json with one of its keys changed.
	edit := func(key string, value any) string {
		var m map[string]any
		if err := json.Unmarshal(bpe, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = value
		if key == "vocab" {
			model := m["model"].(map[string]any)
			model["vocab"] = value
			delete(m, "vocab")
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, c := range []struct{ json, msg string }{
		{`{"model": {"type": "Unigram"}}`, `model type "Unigram" is not supported: torchd's tokenizers read WordPiece (BERT-style) and byte-level BPE (GPT-2, RoBERTa)`},
		{`{"model": {"type": "WordPiece"}, "normalizer": {"type": "NFC"}}`, "the normalizer must be BertNormalizer"},
		{`not json`, "not a Hugging Face tokenizer.json"},
		{`{"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 5}},
		  "normalizer": {"type": "BertNormalizer", "lowercase": true}, "pre_tokenizer": {"type": "BertPreTokenizer"}}`, "the vocabulary's ids must be 0 to 1"},
		// Llama 2's kind: SentencePiece-style BPE.
		{edit("pre_tokenizer", map[string]any{"type": "Metaspace", "replacement": "▁"}), `a BPE tokenizer's pre_tokenizer "Metaspace" is not supported: torchd reads byte-level BPE tokenizers`},
		{edit("pre_tokenizer", nil), `a BPE tokenizer's pre_tokenizer none is not supported`},
		{edit("normalizer", map[string]any{"type": "Lowercase"}), `a BPE tokenizer's normalizer "Lowercase" is not supported`},
		{edit("post_processor", map[string]any{"type": "Weird"}), `post_processor "Weird" is not supported`},
		{edit("vocab", map[string]any{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "a": 5}), `the vocabulary has no token "Ā" for byte 0x00: not a byte-level BPE vocabulary`},
	} {
		_, err := text.ReadTokenizerJSON(strings.NewReader(c.json), text.Options{})
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%.60s: %v, want %q", c.json, err, c.msg)
		}
	}
	if _, err := text.ReadTokenizerJSON(strings.NewReader(string(bpe)), text.Options{MaxLength: 1}); err == nil || !strings.Contains(err.Error(), "max length 1 leaves no room for the 2 special tokens") {
		t.Errorf("max length 1: %v", err)
	}
}
