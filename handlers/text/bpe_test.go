package text

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// testBPEJSON is the tokenizer.json of a byte-level BPE over the 256 byte symbols, a few
// merges, and the added tokens <s> and </s> around each text; edit may change it first.
func testBPEJSON(t testing.TB, edit func(tj, model map[string]any)) string {
	t.Helper()
	vocab := map[string]any{"<s>": 0, "</s>": 1}
	for c := range 256 {
		vocab[string(byteLevel[c])] = len(vocab)
	}
	merges := [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"e", "r"}, {"Ġ", "Ġ"}, {"ä", "¸"}, {"a", "a"}, {"aa", "aa"}}
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": merges}
	tj := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<s>", "normalized": false},
			{"id": 1, "content": "</s>", "normalized": false},
		},
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"post_processor": map[string]any{"type": "RobertaProcessing", "cls": []any{"<s>", 0}, "sep": []any{"</s>", 1}},
		"model":          model,
	}
	if edit != nil {
		edit(tj, model)
	}
	b, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newTestBPE is testBPEJSON's tokenizer; a text's tokens spell its bytes back.
func newTestBPE(t testing.TB, maxLength int) *BPE {
	t.Helper()
	tok, err := ReadTokenizerJSON(strings.NewReader(testBPEJSON(t, nil)), Options{MaxLength: maxLength})
	if err != nil {
		t.Fatal(err)
	}
	return tok.(*BPE)
}

// What a BPE tokenizer.json may not say, with messages that name it.
func TestBPERefusals(t *testing.T) {
	for _, c := range []struct {
		edit func(tj, model map[string]any)
		msg  string
	}{
		{func(_, m map[string]any) { m["dropout"] = 0.1 }, "BPE dropout 0.1 is not supported"},
		{func(_, m map[string]any) { m["continuing_subword_prefix"] = "##" }, `BPE with continuing_subword_prefix "##" or end_of_word_suffix "" is not supported`},
		{func(tj, _ map[string]any) {
			tj["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "use_regex": false}
		}, `pre_tokenizer "ByteLevel" is not supported`},
		{func(_, m map[string]any) { m["merges"] = []any{"Ġ t", 5} }, "merge 1 is 5: want"},
		{func(_, m map[string]any) { m["merges"] = []any{"Ġ t x"} }, "merge 0 is \"Ġ t x\": want two tokens"},
		{func(_, m map[string]any) { m["merges"] = []any{[]string{"x", "y"}, []string{"q", "z"}} }, `merge 0 ("x", "y") names a token the vocabulary lacks`},
		{func(_, m map[string]any) { m["vocab"].(map[string]any)["dup"] = 3 }, "the vocabulary's ids must be 0 to"},
		{func(tj, _ map[string]any) {
			tj["added_tokens"] = []map[string]any{{"id": 2, "content": "<x>"}}
		}, `added token "<x>" (id 2) is not the vocabulary's token of that id`},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "RobertaProcessing", "cls": []any{"<s>"}, "sep": []any{"</s>", 1}}
		}, "post_processor RobertaProcessing: cls and sep must be [token, id]"},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "RobertaProcessing", "cls": []any{"<s>", 99999}, "sep": []any{"</s>", 1}}
		}, "the special token id 99999 is outside the vocabulary"},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}}, "special_tokens": map[string]any{}}
		}, `TemplateProcessing: the special token "<s>" has no ids`},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{}}
		}, "a single text's template must hold the sequence $A once"},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"Sequence": map[string]any{"id": "B"}}}}
		}, "a single text's template holds only special tokens and the sequence $A"},
		{func(tj, _ map[string]any) {
			tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{map[string]any{"type": "Nope"}}}
		}, `post_processor "Nope" is not supported`},
	} {
		tj := testBPEJSON(t, c.edit)
		if _, err := ReadTokenizerJSON(strings.NewReader(tj), Options{}); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v, want %q", err, c.msg)
		}
	}
	// A Sequence of ByteLevel and a template, as Llama 3's post-processor, and padding's id.
	tj := testBPEJSON(t, func(tj, _ map[string]any) {
		tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel"},
			map[string]any{"type": "TemplateProcessing", "single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
				"special_tokens": map[string]any{"<s>": map[string]any{"ids": []int{0}}}}}}
		tj["padding"] = map[string]any{"pad_id": 1}
	})
	tok, err := ReadTokenizerJSON(strings.NewReader(tj), Options{MaxLength: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("aa b"); !slices.Equal(got, []int64{0, 264, 34}) || tok.PadID() != 1 {
		t.Errorf("Encode = %v, pad %d; want [<s> aa Ġ], pad 1", got, tok.PadID())
	}
	for _, c := range []struct {
		ids  []int64
		want string
	}{
		{[]int64{0, 500}, "id 500 at position 1 is outside the vocabulary of 266 tokens"},
		{[]int64{0, 1, 2, 3}, "4 ids exceed the maximum length of 3"},
	} {
		if err := tok.Check(c.ids); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v) = %v, want %q", c.ids, err, c.want)
		}
	}
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
