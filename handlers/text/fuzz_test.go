package text

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

// FuzzTokenize checks, for any two strings a and b, what must hold whatever BERT makes of
// them: no panic; Encode is [CLS], Tokenize's pieces cut to MaxLength, [SEP]; no piece is
// empty or holds whitespace; whitespace around a text changes nothing; and text split at
// whitespace tokenizes piecewise, a + " " + b giving a's pieces then b's.
func FuzzTokenize(f *testing.F) {
	f.Add("UNwant\u00e9d,running", "H\u00e9llo")
	f.Add(" \tHeLLo!how  \n Are yoU?  ", "ah\u535a\u63a8zz")
	vocab := append(slices.Clone(bertTestVocab), "[PAD]", "hello", "\u535a", "a", "##a", "b", "##b", "!", "\u03c2", "##\u03c2")
	lower := newWordPiece(f, Options{Lowercase: true, MaxLength: 8}, vocab...)
	cased := newWordPiece(f, Options{MaxLength: 8}, vocab...)
	hf := newWordPiece(f, Options{Lowercase: true, MaxLength: 8, HuggingFace: true}, vocab...)
	f.Add("a[SEP]b [CLS]", "\u03a3\u03a3 [PAD")
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, w := range []*WordPiece{lower, cased, hf} {
			pieces := w.Tokenize(a)
			for _, p := range pieces {
				if p == "" || strings.IndexFunc(p, unicode.IsSpace) >= 0 {
					t.Fatalf("Tokenize(%q) has piece %q", a, p)
				}
			}
			ids := w.Encode(a)
			want := w.appendText([]int64{w.cls}, a, -1)
			want = append(want[:min(len(want), w.opts.MaxLength-1)], w.sep)
			if !slices.Equal(ids, want) {
				t.Fatalf("Encode(%q) = %v, want %v", a, ids, want)
			}
			if got := w.Tokenize(" \t" + a + "\n "); !slices.Equal(got, pieces) {
				t.Fatalf("Tokenize of %q padded with whitespace = %q, want %q", a, got, pieces)
			}
			joined := append(slices.Clone(pieces), w.Tokenize(b)...)
			if got := w.Tokenize(a + " " + b); !slices.Equal(got, joined) {
				t.Fatalf("Tokenize(%q + \" \" + %q) = %q, want %q", a, b, got, joined)
			}
		}
	})
}
