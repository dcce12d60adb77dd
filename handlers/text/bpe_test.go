package text

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// newTestBPE is a byte-level BPE over the 256 byte symbols, a few merges, and the added
// tokens <s> and </s> around each text; a text's tokens spell its bytes back.
func newTestBPE(t testing.TB, maxLength int) *BPE {
	t.Helper()
	vocab := map[string]int64{"<s>": 0, "</s>": 1}
	for c := range 256 {
		vocab[string(byteLevel[c])] = int64(len(vocab))
	}
	merges := [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"e", "r"}, {"Ġ", "Ġ"}, {"ä", "¸"}, {"a", "a"}, {"aa", "aa"}}
	for _, m := range merges {
		vocab[m[0]+m[1]] = int64(len(vocab))
	}
	tj, err := json.Marshal(map[string]any{
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<s>", "normalized": false},
			{"id": 1, "content": "</s>", "normalized": false},
		},
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"post_processor": map[string]any{"type": "RobertaProcessing", "cls": []any{"<s>", 0}, "sep": []any{"</s>", 1}},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadTokenizerJSON(strings.NewReader(string(tj)), Options{MaxLength: maxLength})
	if err != nil {
		t.Fatal(err)
	}
	return tok.(*BPE)
}

// unByteLevel turns byte-level tokens back into the bytes they spell.
func unByteLevel(tokens []string) string {
	var back [0x200]byte
	for b, r := range byteLevel {
		back[r] = byte(b)
	}
	var out []byte
	for _, tok := range tokens {
		for _, r := range tok {
			out = append(out, back[r])
		}
	}
	return string(out)
}

// GPT-2's pattern splits text as Hugging Face's ByteLevel pre-tokenizer does (each case checked
// with tokenizers 0.23's pre_tokenize_str).
func TestGPT2Pieces(t *testing.T) {
	for text, want := range map[string][]string{
		"a  b":            {"a", " ", " b"},
		"a   \n":          {"a", "   \n"},
		"a \t\tb":         {"a", " \t", "\t", "b"},
		"it's 42!? ok":    {"it", "'s", " 42", "!?", " ok"},
		"don't 'll 'x''s": {"don", "'t", " '", "ll", " '", "x", "''", "s"},
		"I'M Ünïcode½":    {"I", "'", "M", " Ünïcode", "½"}, // case-sensitive, as GPT-2's
		"中文 😀😀x":          {"中文", " 😀😀", "x"},
		"   ":             {"   "},
	} {
		var got []string
		for s := text; s != ""; {
			n := gpt2Piece(s)
			got, s = append(got, s[:n]), s[n:]
		}
		if !slices.Equal(got, want) {
			t.Errorf("pieces of %q = %q, want %q", text, got, want)
		}
	}
}

func TestBPEMerges(t *testing.T) {
	b := newTestBPE(t, 0)
	for text, want := range map[string][]string{
		"the there": {"t", "he", "Ġthe", "r", "e"},
		"aaaaa":     {"aaaa", "a"},
		"a   \n":    {"a", "ĠĠ", "Ġ", "Ċ"},
		"x<s>y</s>": {"x", "<s>", "y", "</s>"},
		"中":         {"ä¸", "Ń"},
		"\xff":      {"ï", "¿", "½"}, // invalid UTF-8 is U+FFFD
		"":          {},
	} {
		if got := b.Tokenize(text); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Errorf("Tokenize(%q) = %q, want %q", text, got, want)
		}
	}
}

// FuzzBPE checks, for any text, what must hold whatever the merges: no panic; the tokens
// spell the text's bytes back (invalid UTF-8 as U+FFFD); Encode is <s>, the tokens cut to
// MaxLength, </s>; and a text's ids do not depend on what follows a space after it.
func FuzzBPE(f *testing.F) {
	f.Add("the there aaaaa", "x")
	f.Add("a<s>b</s><s", "  \t中文 😀")
	b := newTestBPE(f, 8)
	f.Fuzz(func(t *testing.T, a, c string) {
		tokens := b.Tokenize(a)
		if want := strings.ToValidUTF8(a, "\uFFFD"); unByteLevel(tokens) != want {
			t.Fatalf("Tokenize(%q) = %q, which spells %q", a, tokens, unByteLevel(tokens))
		}
		ids := b.Encode(a)
		want := append([]int64{0}, b.appendText(nil, a, -1)...)
		want = append(want[:min(len(want), 7)], 1)
		if !slices.Equal(ids, want) {
			t.Fatalf("Encode(%q) = %v, want %v", a, ids, want)
		}
		if err := b.Check(ids); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(a) && !strings.ContainsAny(a, "<> \t\n\r\v\f\u0085\u00a0") && a != "" {
			// a + " " + c: a's pieces end at the space, which goes with c.
			got := b.Tokenize(a + " " + c)
			if !slices.Equal(got[:min(len(got), len(tokens))], tokens) {
				t.Fatalf("Tokenize(%q + \" \" + %q) = %q, want %q first", a, c, got, tokens)
			}
		}
	})
}
