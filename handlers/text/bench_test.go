package text_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/handlers/text"
)

// BenchmarkEncode is tokenization throughput in bytes of text: the held-out sentences (mostly
// ASCII), and a long accented paragraph, which takes the lower-case + NFD path for most words.
func BenchmarkEncode(b *testing.B) {
	w, h := loadZoo(b)
	var sentences []string
	for _, it := range h.Items {
		sentences = append(sentences, it.Text)
	}
	accented := strings.Repeat("Le café était très agréable, mais la crème brûlée était fade. ", 8)
	for _, c := range []struct {
		name  string
		texts []string
	}{{"heldout", sentences}, {"accented", []string{accented}}} {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for _, s := range c.texts {
				n += len(s)
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range c.texts {
					w.Encode(s)
				}
			}
		})
	}
}

// BenchmarkEncodeBPE is the byte-level BPE's throughput in bytes of text, over the texts of
// models/out/hfbert/tokenizer_bpe_refs.json (many of them CJK, emoji and random code points,
// a few far over max_length).
func BenchmarkEncodeBPE(b *testing.B) {
	dir := filepath.Join("..", "..", "models", "out", "hfbert")
	var refs struct {
		Items []struct {
			Text string `json:"text"`
		} `json:"items"`
	}
	readJSON(b, filepath.Join(dir, "tokenizer_bpe_refs.json"), &refs)
	f, err := os.Open(filepath.Join(dir, "tokenizer_bpe.json"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tok, err := text.ReadTokenizerJSON(f, text.Options{MaxLength: 512})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, it := range refs.Items {
		n += len(it.Text)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for _, it := range refs.Items {
			tok.Encode(it.Text)
		}
	}
}
