package text

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Tokenizer turns text into a model's token ids: a WordPiece (BERT) or a BPE (GPT-2,
// RoBERTa). Implementations are safe for concurrent use.
type Tokenizer interface {
	// Encode returns text's ids with the special tokens the model expects around them, cut to
	// the tokenizer's maximum length.
	Encode(text string) []int64
	// Tokenize returns text's tokens, without special tokens around them and untruncated.
	Tokenize(text string) []string
	// Check reports ids a model of this vocabulary cannot take.
	Check(ids []int64) error
	// Batch pads seqs to the longest and returns them row-major with their attention mask.
	Batch(seqs [][]int64) (ids, mask []int64, width int)
	// Token is the vocabulary's token of id ("" outside it).
	Token(id int64) string
	// PadID is the id that pads a batch.
	PadID() int64
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json (the tokenizers library's
// serialization) that decides a WordPiece's or a byte-level BPE's ids.
type tokenizerJSON struct {
	AddedTokens []struct {
		ID         int64  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer *struct {
		Type         string `json:"type"`
		Lowercase    bool   `json:"lowercase"`
		StripAccents *bool  `json:"strip_accents"`
	} `json:"normalizer"`
	PreTokenizer *struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	} `json:"pre_tokenizer"`
	PostProcessor *postProcessor `json:"post_processor"`
	Padding       *struct {
		PadID int64 `json:"pad_id"`
	} `json:"padding"`
	Model struct {
		Type                    string            `json:"type"`
		UnkToken                string            `json:"unk_token"`
		ContinuingSubwordPrefix string            `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string            `json:"end_of_word_suffix"`
		MaxInputCharsPerWord    int               `json:"max_input_chars_per_word"`
		Dropout                 *float64          `json:"dropout"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]int64  `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
	} `json:"model"`
}

// postProcessor is tokenizer.json's post_processor: what goes around a text's tokens.
type postProcessor struct {
	Type string `json:"type"`
	// RobertaProcessing's and BertProcessing's: [token, id].
	CLS []any `json:"cls"`
	SEP []any `json:"sep"`
	// TemplateProcessing's: the single sentence's template and the special tokens' ids.
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
	// Sequence's.
	Processors []postProcessor `json:"processors"`
}

// ReadTokenizerJSON reads a Hugging Face tokenizer.json and returns the tokenizer that gives
// its ids, special tokens written in the text included. Two kinds are read: BERT-style
// WordPiece (BertNormalizer, BertPreTokenizer, WordPiece with "##" pieces; lowercase comes
// from the file, opts.Lowercase is ignored and opts.HuggingFace implied), and byte-level BPE
// (GPT-2's and RoBERTa's: a ByteLevel pre-tokenizer, no normalizer or NFC). Others (Unigram:
// XLM-R, T5; Metaspace BPE: Llama 2) are refused with a message that says so.
func ReadTokenizerJSON(r io.Reader, opts Options) (Tokenizer, error) {
	var tj tokenizerJSON
	if err := json.NewDecoder(r).Decode(&tj); err != nil {
		return nil, fmt.Errorf("not a Hugging Face tokenizer.json: %v", err)
	}
	switch tj.Model.Type {
	case "WordPiece":
		return readWordPieceJSON(&tj, opts)
	case "BPE":
		return readBPEJSON(&tj, opts)
	}
	return nil, fmt.Errorf("model type %q is not supported: torchd's tokenizers read WordPiece (BERT-style) and byte-level BPE (GPT-2, RoBERTa) tokenizer.json files, not Unigram ones (XLM-R, T5)", tj.Model.Type)
}

func readWordPieceJSON(tj *tokenizerJSON, opts Options) (*WordPiece, error) {
	m := tj.Model
	if n := tj.Normalizer; n == nil || n.Type != "BertNormalizer" {
		return nil, fmt.Errorf("the normalizer must be BertNormalizer, as BERT-style WordPiece tokenizers have")
	}
	if p := tj.PreTokenizer; p == nil || p.Type != "BertPreTokenizer" {
		return nil, fmt.Errorf("the pre_tokenizer must be BertPreTokenizer, as BERT-style WordPiece tokenizers have")
	}
	n := tj.Normalizer
	// BertNormalizer's strip_accents null follows lowercase; torchd's tokenizer couples them.
	if n.StripAccents != nil && *n.StripAccents != n.Lowercase {
		return nil, fmt.Errorf("normalizer strip_accents %v with lowercase %v is not supported (torchd strips accents exactly when it lower-cases)", *n.StripAccents, n.Lowercase)
	}
	if m.ContinuingSubwordPrefix != "##" || m.UnkToken != "[UNK]" || m.MaxInputCharsPerWord != maxWordRunes {
		return nil, fmt.Errorf("WordPiece with continuing_subword_prefix %q, unk_token %q and max_input_chars_per_word %d is not supported (BERT's are \"##\", \"[UNK]\" and %d)",
			m.ContinuingSubwordPrefix, m.UnkToken, m.MaxInputCharsPerWord, maxWordRunes)
	}
	tokens := make([]string, len(m.Vocab))
	seen := make([]bool, len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 || id >= int64(len(tokens)) || seen[id] {
			return nil, fmt.Errorf("the vocabulary's ids must be 0 to %d, each once; %q has %d", len(tokens)-1, tok, id)
		}
		tokens[id], seen[id] = tok, true
	}
	var specials []string
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= int64(len(tokens)) || tokens[a.ID] != a.Content {
			return nil, fmt.Errorf("added token %q (id %d) is not the vocabulary's token of that id", a.Content, a.ID)
		}
		specials = append(specials, a.Content)
	}
	opts.Lowercase, opts.HuggingFace = n.Lowercase, true
	return fromTokens(tokens, opts, specials)
}

func readBPEJSON(tj *tokenizerJSON, opts Options) (*BPE, error) {
	m := tj.Model
	b := &BPE{maxLength: opts.MaxLength, ignoreMerges: m.IgnoreMerges, vocab: m.Vocab}
	if n := tj.Normalizer; n != nil {
		if n.Type != "NFC" {
			return nil, fmt.Errorf("a BPE tokenizer's normalizer %q is not supported: torchd reads byte-level BPE tokenizers with none or NFC", n.Type)
		}
		b.nfc = true
	}
	p := tj.PreTokenizer
	if p == nil || p.Type != "ByteLevel" || p.UseRegex != nil && !*p.UseRegex {
		what := "none"
		if p != nil {
			what = fmt.Sprintf("%q", p.Type)
		}
		return nil, fmt.Errorf("a BPE tokenizer's pre_tokenizer %s is not supported: torchd reads byte-level BPE tokenizers (the ByteLevel pre_tokenizer with GPT-2's pattern, as GPT-2's and RoBERTa's), not Metaspace or Split ones", what)
	}
	b.addPrefixSpace = p.AddPrefixSpace
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, fmt.Errorf("BPE dropout %v is not supported: it makes the ids random", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("BPE with continuing_subword_prefix %q or end_of_word_suffix %q is not supported (byte-level BPE has neither)", m.ContinuingSubwordPrefix, m.EndOfWordSuffix)
	}

	// The ids: the vocabulary's and the added tokens', each id one token's.
	size := int64(len(m.Vocab) + len(tj.AddedTokens))
	b.tokens = make([]string, size)
	seen := make([]bool, size)
	for tok, id := range m.Vocab {
		if id < 0 || id >= size || seen[id] {
			return nil, fmt.Errorf("the vocabulary's ids must be 0 to %d, each once; %q has %d", size-1, tok, id)
		}
		b.tokens[id], seen[id] = tok, true
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= size || seen[a.ID] && b.tokens[a.ID] != a.Content || a.Content == "" {
			return nil, fmt.Errorf("added token %q (id %d) is not the vocabulary's token of that id", a.Content, a.ID)
		}
		b.tokens[a.ID], seen[a.ID] = a.Content, true
		t := addedToken{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord}
		if a.Normalized {
			b.addedNorm = append(b.addedNorm, t)
		} else {
			b.added = append(b.added, t)
		}
	}
	for len(b.tokens) > 0 && !seen[len(b.tokens)-1] {
		b.tokens = b.tokens[:len(b.tokens)-1]
	}
	for c := range 256 {
		sym := string(byteLevel[c])
		id, ok := m.Vocab[sym]
		if !ok {
			return nil, fmt.Errorf("the vocabulary has no token %q for byte 0x%02x: not a byte-level BPE vocabulary", sym, c)
		}
		b.byteIDs[c] = id
	}

	// The merges, by rank: "left right" strings, or [left, right] pairs (tokenizers ≥ 0.20).
	b.merges = make(map[uint64]merge, len(m.Merges))
	for rank, raw := range m.Merges {
		var pair []string
		var s string
		if json.Unmarshal(raw, &s) == nil {
			pair = strings.Split(s, " ")
		} else if json.Unmarshal(raw, &pair) != nil {
			return nil, fmt.Errorf("merge %d is %.40s: want \"left right\" or [\"left\", \"right\"]", rank, raw)
		}
		if len(pair) != 2 {
			return nil, fmt.Errorf("merge %d is %.40s: want two tokens", rank, raw)
		}
		l, okl := m.Vocab[pair[0]]
		r, okr := m.Vocab[pair[1]]
		id, ok := m.Vocab[pair[0]+pair[1]]
		if !okl || !okr || !ok {
			return nil, fmt.Errorf("merge %d (%q, %q) names a token the vocabulary lacks", rank, pair[0], pair[1])
		}
		// A pair merged twice keeps its last rank, as the tokenizers library keeps it.
		b.merges[pairKey(l, r)] = merge{rank: int32(rank), id: int32(id)}
	}

	var err error
	if b.prefix, b.suffix, err = tj.PostProcessor.around(); err != nil {
		return nil, err
	}
	if opts.MaxLength < 0 || opts.MaxLength > 0 && opts.MaxLength < len(b.prefix)+len(b.suffix) {
		return nil, fmt.Errorf("max length %d leaves no room for the %d special tokens around a text", opts.MaxLength, len(b.prefix)+len(b.suffix))
	}
	// Padding is masked out, so any id would do; the file's, or <pad>, is what Python pads with.
	if tj.Padding != nil {
		b.pad = tj.Padding.PadID
	} else if id, ok := m.Vocab["<pad>"]; ok {
		b.pad = id
	}
	for _, id := range append(append([]int64{b.pad}, b.prefix...), b.suffix...) {
		if id < 0 || id >= int64(len(b.tokens)) {
			return nil, fmt.Errorf("the special token id %d is outside the vocabulary of %d tokens", id, len(b.tokens))
		}
	}
	return b, nil
}

// around returns the ids the post-processor puts before and after a single text's tokens.
func (p *postProcessor) around() (prefix, suffix []int64, err error) {
	if p == nil {
		return nil, nil, nil
	}
	switch p.Type {
	case "ByteLevel":
		// It only trims offsets.
		return nil, nil, nil
	case "RobertaProcessing", "BertProcessing":
		cls, ok1 := tokenID(p.CLS)
		sep, ok2 := tokenID(p.SEP)
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("post_processor %s: cls and sep must be [token, id]", p.Type)
		}
		return []int64{cls}, []int64{sep}, nil
	case "TemplateProcessing":
		seqs := 0
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil && piece.Sequence.ID == "A":
				seqs++
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("post_processor TemplateProcessing: the special token %q has no ids", piece.SpecialToken.ID)
				}
				if seqs == 0 {
					prefix = append(prefix, st.IDs...)
				} else {
					suffix = append(suffix, st.IDs...)
				}
			default:
				return nil, nil, fmt.Errorf("post_processor TemplateProcessing: a single text's template holds only special tokens and the sequence $A")
			}
		}
		if seqs != 1 {
			return nil, nil, fmt.Errorf("post_processor TemplateProcessing: a single text's template must hold the sequence $A once")
		}
		return prefix, suffix, nil
	case "Sequence":
		for i := range p.Processors {
			pre, suf, err := p.Processors[i].around()
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(pre, prefix...), append(suffix, suf...)
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post_processor %q is not supported: torchd reads ByteLevel, RobertaProcessing, BertProcessing and TemplateProcessing", p.Type)
}

// tokenID reads a [token, id] pair.
func tokenID(pair []any) (int64, bool) {
	if len(pair) != 2 {
		return 0, false
	}
	f, ok := pair[1].(float64)
	return int64(f), ok && f >= 0 && f == float64(int64(f))
}
