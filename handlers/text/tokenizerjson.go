package text

import (
	"encoding/json"
	"fmt"
	"io"
)

// tokenizerJSON is the part of a Hugging Face tokenizer.json (the tokenizers library's
// serialization) that decides a BERT-style tokenizer's ids.
type tokenizerJSON struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Normalizer *struct {
		Type         string `json:"type"`
		Lowercase    bool   `json:"lowercase"`
		StripAccents *bool  `json:"strip_accents"`
	} `json:"normalizer"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	Model struct {
		Type                    string           `json:"type"`
		UnkToken                string           `json:"unk_token"`
		ContinuingSubwordPrefix string           `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
		Vocab                   map[string]int64 `json:"vocab"`
	} `json:"model"`
}

// ReadTokenizerJSON reads a Hugging Face tokenizer.json of a BERT-style WordPiece tokenizer
// (BertNormalizer, BertPreTokenizer, WordPiece with "##" pieces) and returns the WordPiece
// that gives its ids, special tokens written in the text included. Lowercase comes from the
// file; opts.Lowercase is ignored and opts.HuggingFace is implied. Other tokenizers (BPE,
// Unigram: RoBERTa, XLM-R, T5, ...) are refused with a message that says so.
func ReadTokenizerJSON(r io.Reader, opts Options) (*WordPiece, error) {
	var tj tokenizerJSON
	if err := json.NewDecoder(r).Decode(&tj); err != nil {
		return nil, fmt.Errorf("not a Hugging Face tokenizer.json: %v", err)
	}
	m := tj.Model
	if m.Type != "WordPiece" {
		return nil, fmt.Errorf("model type %q is not supported: torchd's tokenizer reads BERT-style WordPiece tokenizers, not BPE or Unigram ones", m.Type)
	}
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
