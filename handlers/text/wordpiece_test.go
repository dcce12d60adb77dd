package text

import (
	"slices"
	"strings"
	"testing"
)

// newWordPiece builds a tokenizer over tokens; [PAD] goes last when missing, so the ids of
// BERT's test vocabularies stay as in tokenization_test.py.
func newWordPiece(t testing.TB, opts Options, tokens ...string) *WordPiece {
	t.Helper()
	if !slices.Contains(tokens, "[PAD]") {
		tokens = append(slices.Clip(tokens), "[PAD]")
	}
	w, err := Read(strings.NewReader(strings.Join(tokens, "\n")), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The vocabulary of BERT's tokenization_test.py.
var bertTestVocab = []string{"[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","}

// The cases of google-research/bert's tokenization_test.py, through the whole tokenizer.
func TestBERTTokenizationCases(t *testing.T) {
	lower := Options{Lowercase: true}
	words := []string{"[UNK]", "[CLS]", "[SEP]", "hello", "how", "are", "you", "!", "?", "ah", "zz",
		"\u535a", "\u63a8", "HeLLo", "Are", "yoU"}
	for _, c := range []struct {
		name  string
		opts  Options
		vocab []string
		text  string
		want  []string
	}{
		{"full tokenizer", lower, bertTestVocab, "UNwant\u00e9d,running", []string{"un", "##want", "##ed", ",", "runn", "##ing"}},
		{"chinese", lower, words, "ah\u535a\u63a8zz", []string{"ah", "\u535a", "\u63a8", "zz"}},
		{"basic lower", lower, words, " \tHeLLo!how  \n Are yoU?  ", []string{"hello", "!", "how", "are", "you", "?"}},
		{"accent", lower, words, "H\u00e9llo", []string{"hello"}},
		{"basic no lower", Options{}, words, " \tHeLLo!how  \n Are yoU?  ", []string{"HeLLo", "!", "how", "Are", "yoU", "?"}},
		{"no lower keeps accents", Options{}, words, "H\u00e9llo", []string{"[UNK]"}},
		{"wordpiece empty", lower, bertTestVocab[:10], "", nil},
		{"wordpiece", lower, bertTestVocab[:10], "unwanted running", []string{"un", "##want", "##ed", "runn", "##ing"}},
		{"wordpiece unknown", lower, bertTestVocab[:10], "unwantedX running", []string{"[UNK]", "runn", "##ing"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWordPiece(t, c.opts, c.vocab...)
			if got := w.Tokenize(c.text); !slices.Equal(got, c.want) {
				t.Fatalf("Tokenize(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestEncodeFullTokenizerIDs(t *testing.T) {
	w := newWordPiece(t, Options{Lowercase: true}, bertTestVocab...)
	// tokenization_test.py: convert_tokens_to_ids gives [7, 4, 5, 10, 8, 9]; Encode adds
	// [CLS] (1) and [SEP] (2).
	if got, want := w.Encode("UNwant\u00e9d,running"), []int64{1, 7, 4, 5, 10, 8, 9, 2}; !slices.Equal(got, want) {
		t.Fatalf("Encode = %v, want %v", got, want)
	}
}

func TestTokenizerCharacterClasses(t *testing.T) {
	for _, r := range " \t\r\n\u00a0\u2003" {
		if !isWhitespace(r) {
			t.Errorf("isWhitespace(%U) = false", r)
		}
	}
	for _, r := range "A-\u0005" {
		if isWhitespace(r) {
			t.Errorf("isWhitespace(%U) = true", r)
		}
	}
	bert, hf := &WordPiece{}, &WordPiece{opts: Options{HuggingFace: true}}
	for _, r := range "\u0005\u0000\u007f\u200b\ufeff\ue000\U000e0001\u0378" { // Cc, Cf, Co, unassigned
		if !bert.isControl(r) {
			t.Errorf("isControl(%U) = false", r)
		}
	}
	for _, r := range "A \t\r\n\U0001F4A9\u00e9\u0301" {
		if bert.isControl(r) || hf.isControl(r) {
			t.Errorf("isControl(%U) = true", r)
		}
	}
	// Hugging Face's tokenizers keep unassigned code points.
	if hf.isControl('\u0378') || !hf.isControl('\ue000') {
		t.Errorf("Hugging Face: isControl(U+0378) = %v, isControl(U+E000) = %v", hf.isControl('\u0378'), hf.isControl('\ue000'))
	}
	for _, r := range "-$`.^+<~\u00bf\u2014\u3001\uff01" {
		if !isPunct(r) {
			t.Errorf("isPunct(%U) = false", r)
		}
	}
	for _, r := range "A 0\u00e9\U0001F600\u00a9" {
		if isPunct(r) {
			t.Errorf("isPunct(%U) = true", r)
		}
	}
}

// Edge cases of BERT's BasicTokenizer and WordPiece beyond its own tests.
func TestTokenizeEdgeCases(t *testing.T) {
	vocab := []string{"[UNK]", "[CLS]", "[SEP]", "[PAD]", "hello", "world", "good", "##s", "##ness",
		"cafe", "creme", "brulee", "\u4e2d", "\u6587", "\u8c48", "!", ".", "-", "a", "##a", "##b",
		"\u03bf\u03b4\u03bf\u03c2", "\u03c4\u03b5\u03bb\u03bf\u03c2", "\u03c3\u03bf\u03c2", "istanbul",
		"\u1100", "##\u1161", "##\u11a8", "x", "##x", "`", "b", "e"}
	w := newWordPiece(t, Options{Lowercase: true}, vocab...)
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"controls and zero-width characters join", "hel\u0000lo\u200b wor\u00adld\u0007", []string{"hello", "world"}},
		{"U+FFFD and invalid UTF-8 are dropped", "hel\ufffdlo wo\xffrld", []string{"hello", "world"}},
		{"unicode whitespace", "hello\u00a0world\u3000good\u2028hello\u2029world", []string{"hello", "world", "good", "hello", "world"}},
		{"U+0085 is a control, not a space", "world\u0085good", []string{"[UNK]"}},
		{"punctuation splits", "hello!world.-good", []string{"hello", "!", "world", ".", "-", "good"}},
		{"subwords", "goodness goods", []string{"good", "##ness", "good", "##s"}},
		{"accents", "Caf\u00e9 CR\u00c8ME Br\u00fbl\u00e9e", []string{"cafe", "creme", "brulee"}},
		{"decomposed accents", "cafe\u0301", []string{"cafe"}},
		{"lone combining marks vanish", "\u0301\u0302 hello", []string{"hello"}},
		{"CJK split", "hello\u4e2d\u6587world", []string{"hello", "\u4e2d", "\u6587", "world"}},
		{"CJK compatibility ideograph", "\uf900", []string{"\u8c48"}},
		{"hangul decomposes to jamo", "\uac01", []string{"\u1100", "##\u1161", "##\u11a8"}},
		{"final sigma", "\u039f\u0394\u039f\u03a3 \u03a4\u0395\u039b\u039f\u03a3. \u03a3\u039f\u03a3", []string{"\u03bf\u03b4\u03bf\u03c2", "\u03c4\u03b5\u03bb\u03bf\u03c2", ".", "\u03c3\u03bf\u03c2"}},
		{"dotted capital I", "\u0130stanbul", []string{"istanbul"}},
		{"greek varia decomposes to a backtick", "a\u1fefb", []string{"a", "`", "b"}},
		{"unknown word", "hello qqq", []string{"hello", "[UNK]"}},
		{"emoji", "good\U0001F600 \U0001F600", []string{"[UNK]", "[UNK]"}},
		{"100 characters", strings.Repeat("x", 100), append([]string{"x"}, slices.Repeat([]string{"##x"}, 99)...)},
		{"101 characters", strings.Repeat("x", 101), []string{"[UNK]"}},
		{"101 characters with accents stripped to 100", strings.Repeat("x", 100) + "\u0301", append([]string{"x"}, slices.Repeat([]string{"##x"}, 99)...)},
		{"only whitespace", " \t\n\u00a0", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := w.Tokenize(c.text); !slices.Equal(got, c.want) {
				t.Fatalf("Tokenize(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestWordPieceEncodeTruncates(t *testing.T) {
	text := "unwanted running, unwanted"
	for _, c := range []struct {
		max  int
		want []int64
	}{
		{0, []int64{1, 7, 4, 5, 8, 9, 10, 7, 4, 5, 2}},
		{20, []int64{1, 7, 4, 5, 8, 9, 10, 7, 4, 5, 2}},
		{11, []int64{1, 7, 4, 5, 8, 9, 10, 7, 4, 5, 2}},
		{10, []int64{1, 7, 4, 5, 8, 9, 10, 7, 4, 2}},
		{4, []int64{1, 7, 4, 2}}, // mid-word, as BERT truncates pieces
		{2, []int64{1, 2}},
	} {
		w := newWordPiece(t, Options{Lowercase: true, MaxLength: c.max}, bertTestVocab...)
		if got := w.Encode(text); !slices.Equal(got, c.want) {
			t.Errorf("MaxLength %d: Encode = %v, want %v", c.max, got, c.want)
		}
	}
	w := newWordPiece(t, Options{Lowercase: true, MaxLength: 5}, bertTestVocab...)
	if got := w.Encode(""); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("Encode(\"\") = %v, want [CLS] [SEP]", got)
	}
	if got := w.Encode(strings.Repeat("running ", 1<<16)); !slices.Equal(got, []int64{1, 8, 9, 8, 2}) {
		t.Errorf("Encode(long) = %v", got)
	}
}

func TestWordPieceBatchPads(t *testing.T) {
	w := newWordPiece(t, Options{}, "[UNK]", "[CLS]", "[SEP]", "x", "[PAD]")
	ids, mask, width := w.Batch([][]int64{{1, 3, 2}, {1, 2}, {1, 3, 3, 3, 2}})
	if width != 5 {
		t.Fatalf("width %d, want 5", width)
	}
	wantIDs := []int64{1, 3, 2, 4, 4, 1, 2, 4, 4, 4, 1, 3, 3, 3, 2}
	wantMask := []int64{1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1}
	if !slices.Equal(ids, wantIDs) || !slices.Equal(mask, wantMask) {
		t.Fatalf("Batch = %v %v, want %v %v", ids, mask, wantIDs, wantMask)
	}
}

func TestWordPieceReadVocabulary(t *testing.T) {
	for _, c := range []struct{ name, vocab, err string }{
		{"no [UNK]", "[CLS]\n[SEP]\n[PAD]\n", "no [UNK]"},
		{"no [PAD]", "[UNK]\n[CLS]\n[SEP]\n", "no [PAD]"},
		{"empty", "", "no [UNK]"},
	} {
		if _, err := Read(strings.NewReader(c.vocab), Options{}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
	if _, err := Read(strings.NewReader("[UNK]\n[CLS]\n[SEP]\n[PAD]\n"), Options{MaxLength: 1}); err == nil {
		t.Error("MaxLength 1 accepted")
	}
	// Trimmed lines, CRLF, and a repeated token keeping its last id, as BERT's load_vocab.
	w, err := Read(strings.NewReader("[PAD]\r\n  [UNK] \n[CLS]\n[SEP]\nhi\nhi\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Encode("hi"); !slices.Equal(got, []int64{2, 5, 3}) {
		t.Fatalf("Encode(hi) = %v, want [2 5 3]", got)
	}
	if _, err := Load("testdata/no-such-vocab.txt", Options{}); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

// Hugging Face's pipeline: special tokens written in the text are those tokens, Σ lower-cases
// to σ wherever it stands, and the length limit counts the special tokens.
func TestHuggingFaceOption(t *testing.T) {
	vocab := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[", "]", "mask", "a", "b", "\u03c3", "\u03c2", "##\u03c3", "##\u03c2"}
	hf := newWordPiece(t, Options{Lowercase: true, HuggingFace: true}, vocab...)
	bert := newWordPiece(t, Options{Lowercase: true}, vocab...)
	for _, c := range []struct {
		text     string
		hf, bert []string
	}{
		{"a [MASK] b", []string{"a", "[MASK]", "b"}, []string{"a", "[", "mask", "]", "b"}},
		{"a[SEP]b", []string{"a", "[SEP]", "b"}, []string{"a", "[", "[UNK]", "]", "b"}},
		{"[mask] [MASK", []string{"[", "mask", "]", "[", "mask"}, []string{"[", "mask", "]", "[", "mask"}},
		{"\u03a3\u03a3", []string{"\u03c3", "##\u03c3"}, []string{"\u03c3", "##\u03c2"}},
	} {
		if got := hf.Tokenize(c.text); !slices.Equal(got, c.hf) {
			t.Errorf("HuggingFace Tokenize(%q) = %q, want %q", c.text, got, c.hf)
		}
		if got := bert.Tokenize(c.text); !slices.Equal(got, c.bert) {
			t.Errorf("BERT Tokenize(%q) = %q, want %q", c.text, got, c.bert)
		}
	}
	cut := newWordPiece(t, Options{Lowercase: true, MaxLength: 4, HuggingFace: true}, vocab...)
	for text, want := range map[string][]int64{
		"a [MASK] b": {2, 8, 4, 3},
		"[MASK] a b": {2, 4, 8, 3},
		"a b [MASK]": {2, 8, 9, 3},
	} {
		if got := cut.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) at MaxLength 4 = %v, want %v", text, got, want)
		}
	}
}
