// Package text turns text into token ids, as the model's own tokenizer gives them. A WordPiece
// does it for BERT-style models exactly as google-research/bert's tokenization.py does: its
// BasicTokenizer (control characters dropped, whitespace normalized, optional lower-casing and
// accent stripping, punctuation and CJK characters split off), then greedy longest-match-first
// WordPiece over a vocab.txt, then [CLS] … [SEP]; or as Hugging Face's tokenizers library does
// from a tokenizer.json. A BPE does it for byte-level BPE models (GPT-2, RoBERTa) from a
// tokenizer.json, as Hugging Face's tokenizers library does. It knows strings and ids,
// nothing of tensors, models or HTTP.
package text

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Options configure a WordPiece. The zero value keeps case and does not truncate.
type Options struct {
	// Lowercase lower-cases and strips accents before splitting, as BERT's uncased models
	// were trained (BERT's do_lower_case).
	Lowercase bool
	// MaxLength bounds what Encode returns, [CLS] and [SEP] included; 0 means no bound.
	MaxLength int
	// HuggingFace reproduces Hugging Face tokenizers' BERT pipeline (tokenizer.json's
	// BertNormalizer, BertPreTokenizer and WordPiece) rather than tokenization.py's, where
	// they differ: special tokens written in the text ("[MASK]") are those tokens; accents are
	// stripped before lower-casing, which is rune by rune (Σ is always σ); unassigned code
	// points are kept, not dropped; CJK Extension E starts at U+2B920.
	HuggingFace bool
}

// WordPiece is a tokenizer over one vocabulary. It is safe for concurrent use.
type WordPiece struct {
	opts   Options
	ids    map[string]int64
	tokens []string // by id
	// longest is the byte length of the longest token: no longer candidate can match, which
	// bounds the greedy search on long words.
	longest            int
	unk, cls, sep, pad int64
	// specials are the special tokens the text may spell out (HuggingFace only).
	specials []special
}

type special struct {
	tok string
	id  int64
}

// maxWordRunes is BERT's max_input_chars_per_word: a longer word is one [UNK].
const maxWordRunes = 100

// Load reads a BERT vocab.txt.
func Load(vocabPath string, opts Options) (*WordPiece, error) {
	f, err := os.Open(vocabPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := Read(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", vocabPath, err)
	}
	return w, nil
}

// Read reads a vocabulary in BERT's vocab.txt format: one token per line, its id the line
// number from 0, surrounding whitespace trimmed. It must hold [UNK], [CLS], [SEP] and [PAD].
func Read(r io.Reader, opts Options) (*WordPiece, error) {
	var tokens []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		tokens = append(tokens, strings.TrimSpace(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var specials []string
	if opts.HuggingFace {
		// tokenizer.json's added_tokens for a BERT vocabulary.
		specials = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	}
	return fromTokens(tokens, opts, specials)
}

// fromTokens makes a WordPiece of tokens, each token's id its index; specials are the
// special tokens the text may spell out (those in the vocabulary are kept).
func fromTokens(tokens []string, opts Options, specials []string) (*WordPiece, error) {
	if opts.MaxLength < 0 || opts.MaxLength == 1 {
		return nil, fmt.Errorf("max length %d leaves no room for [CLS] and [SEP]", opts.MaxLength)
	}
	w := &WordPiece{opts: opts, ids: make(map[string]int64, len(tokens)), tokens: tokens}
	for i, tok := range tokens {
		// A repeated token takes its last line's id, as BERT's load_vocab gives it.
		w.ids[tok] = int64(i)
		w.longest = max(w.longest, len(tok))
	}
	for _, s := range []struct {
		tok string
		id  *int64
	}{{"[UNK]", &w.unk}, {"[CLS]", &w.cls}, {"[SEP]", &w.sep}, {"[PAD]", &w.pad}} {
		id, ok := w.ids[s.tok]
		if !ok {
			return nil, fmt.Errorf("the vocabulary (%d tokens) has no %s token", len(w.tokens), s.tok)
		}
		*s.id = id
	}
	for _, tok := range specials {
		if id, ok := w.ids[tok]; ok && tok != "" {
			w.specials = append(w.specials, special{tok, id})
		}
	}
	return w, nil
}

// Encode returns text's ids as BERT models take them: [CLS], text's pieces, [SEP], with the
// pieces cut to leave MaxLength ids in all.
func (w *WordPiece) Encode(text string) []int64 {
	limit := -1
	if w.opts.MaxLength > 0 {
		limit = w.opts.MaxLength - 2
	}
	ids := make([]int64, 1, 32)
	ids[0] = w.cls
	ids = w.appendText(ids, text, limit)
	return append(ids, w.sep)
}

// Tokenize returns text's pieces, without [CLS] and [SEP] and untruncated, e.g. "un",
// "##want", "##ed" for "unwanted".
func (w *WordPiece) Tokenize(text string) []string {
	ids := w.appendText(nil, text, -1)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = w.tokens[id]
	}
	return out
}

// Check reports ids that did not come from Encode and that a model built for this
// vocabulary cannot take: an id outside the vocabulary, or more ids than MaxLength.
func (w *WordPiece) Check(ids []int64) error {
	if w.opts.MaxLength > 0 && len(ids) > w.opts.MaxLength {
		return fmt.Errorf("%d ids exceed the maximum length of %d", len(ids), w.opts.MaxLength)
	}
	for i, id := range ids {
		if id < 0 || id >= int64(len(w.tokens)) {
			return fmt.Errorf("id %d at position %d is outside the vocabulary of %d tokens", id, i, len(w.tokens))
		}
	}
	return nil
}

// Batch pads seqs with [PAD] to the longest one and returns them row-major, with their
// attention mask (1 for a token, 0 for padding): both are [len(seqs), width].
func (w *WordPiece) Batch(seqs [][]int64) (ids, mask []int64, width int) {
	return padBatch(seqs, w.pad)
}

// scratch holds the buffers one tokenization reuses; pooled because Encode runs once per
// request.
type scratch struct{ field, lower, norm, piece []byte }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// appendText appends at most limit (-1: all) of text's piece ids to ids. It stops reading
// text once the limit is reached, so a huge request costs no more than a short one.
func (w *WordPiece) appendText(ids []int64, text string, limit int) []int64 {
	// Hugging Face matches special tokens in the raw text first and tokenizes the segments
	// between them on their own.
	start := len(ids)
	left := func() int {
		if limit < 0 {
			return -1
		}
		return limit - (len(ids) - start)
	}
	for len(w.specials) > 0 {
		at, sp := w.nextSpecial(text)
		if at < 0 {
			break
		}
		ids = w.appendSegment(ids, text[:at], left())
		if left() == 0 {
			return ids
		}
		ids = append(ids, sp.id)
		text = text[at+len(sp.tok):]
	}
	if left() == 0 {
		return ids
	}
	return w.appendSegment(ids, text, left())
}

// nextSpecial finds the first special token in text, the longest where several start
// there, as Hugging Face's added-token matching does: its offset (-1: none) and which.
func (w *WordPiece) nextSpecial(text string) (int, special) {
	at, found := -1, special{}
	for _, sp := range w.specials {
		i := strings.Index(text, sp.tok)
		if i >= 0 && (at < 0 || i < at || i == at && len(sp.tok) > len(found.tok)) {
			at, found = i, sp
		}
	}
	return at, found
}

// appendSegment is appendText for text without special tokens.
func (w *WordPiece) appendSegment(ids []int64, text string, limit int) []int64 {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	start := len(ids)
	// A field is a run of text between whitespace, BERT's whitespace-split token: it is
	// lower-cased as a whole (final sigma depends on its neighbours), then split at
	// punctuation.
	field, ascii := sc.field[:0], true
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		cjk := false
		switch {
		case r == 0 || r == utf8.RuneError || w.isControl(r):
			// Invalid UTF-8 decodes as U+FFFD, which BERT drops as it drops U+FFFD itself.
			continue
		case isWhitespace(r):
		case w.isCJK(r):
			cjk = true
		default:
			field = utf8.AppendRune(field, r)
			ascii = ascii && r < utf8.RuneSelf
			continue
		}
		// Whitespace ends a field; a CJK character ends one and is one.
		if len(field) > 0 {
			ids = w.appendField(ids, field, ascii, sc)
			field, ascii = field[:0], true
		}
		if cjk {
			ids = w.appendField(ids, utf8.AppendRune(field, r), false, sc)
		}
		if limit >= 0 && len(ids)-start >= limit {
			break
		}
	}
	if len(field) > 0 && (limit < 0 || len(ids)-start < limit) {
		ids = w.appendField(ids, field, ascii, sc)
	}
	sc.field = field[:0]
	if limit >= 0 && len(ids)-start > limit {
		ids = ids[:start+limit]
	}
	return ids
}

// appendField appends the pieces of one whitespace-delimited field, which it may modify.
func (w *WordPiece) appendField(ids []int64, field []byte, ascii bool, sc *scratch) []int64 {
	word := field
	if w.opts.Lowercase {
		if ascii {
			for i, c := range field {
				if 'A' <= c && c <= 'Z' {
					field[i] = c + 'a' - 'A'
				}
			}
		} else if w.opts.HuggingFace {
			sc.norm = appendStripAccents(sc.norm[:0], field, hfPlain)
			sc.lower = appendLowerRunes(sc.lower[:0], sc.norm)
			word = sc.lower
		} else {
			sc.lower = appendLower(sc.lower[:0], field)
			sc.norm = appendStripAccents(sc.norm[:0], sc.lower, nil)
			word = sc.norm
		}
	}
	// Each punctuation character is a word of its own and ends the word before it.
	begin := 0
	for i := 0; i < len(word); {
		r, size := utf8.DecodeRune(word[i:])
		if isPunct(r) && !(w.opts.HuggingFace && unicode.Is(hfPlain, r)) {
			ids = w.appendWord(ids, word[begin:i], sc)
			ids = w.appendWord(ids, word[i:i+size], sc)
			begin = i + size
		}
		i += size
	}
	return w.appendWord(ids, word[begin:], sc)
}

// appendWord appends word's WordPiece ids: greedily the longest vocabulary entry from the
// start, then the longest "##" continuation from where it ended, and so on; one [UNK] for the
// whole word if some position matches nothing or the word is over 100 characters.
func (w *WordPiece) appendWord(ids []int64, word []byte, sc *scratch) []int64 {
	if len(word) == 0 {
		return ids
	}
	if utf8.RuneCount(word) > maxWordRunes {
		return append(ids, w.unk)
	}
	first := len(ids)
	piece := append(sc.piece[:0], "##"...)
	defer func() { sc.piece = piece }()
	for start := 0; start < len(word); {
		end := len(word)
		if end-start > w.longest {
			end = start + w.longest
			for end > start && !utf8.RuneStart(word[end]) {
				end--
			}
		}
		found := false
		for end > start {
			var id int64
			// string(b) in a map index does not allocate.
			if start == 0 {
				id, found = w.ids[string(word[:end])]
			} else {
				piece = append(piece[:2], word[start:end]...)
				id, found = w.ids[string(piece)]
			}
			if found {
				ids = append(ids, id)
				break
			}
			_, n := utf8.DecodeLastRune(word[start:end])
			end -= n
		}
		if !found {
			return append(ids[:first], w.unk)
		}
		start = end
	}
	return ids
}

// Token returns the vocabulary's token for id ("" outside it).
func (w *WordPiece) Token(id int64) string {
	if id < 0 || id >= int64(len(w.tokens)) {
		return ""
	}
	return w.tokens[id]
}

// PadID is the id of [PAD].
func (w *WordPiece) PadID() int64 { return w.pad }
