package text

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// BPE is a byte-level BPE tokenizer, GPT-2's and RoBERTa's kind, as Hugging Face's tokenizers
// library runs one from a tokenizer.json: added tokens (<s>, <mask>, ...) are matched in the
// raw text first; each segment between them is split by GPT-2's pattern, each piece's UTF-8
// bytes become byte-level symbols, and adjacent symbols are merged by the merges' ranks; the
// post-processor's special tokens go around the whole. Read one with ReadTokenizerJSON. It is
// safe for concurrent use.
type BPE struct {
	tokens  []string // by id ("" for an id no token has)
	vocab   map[string]int64
	merges  map[uint64]merge // by pair of ids (left << 32 | right)
	byteIDs [256]int64       // each byte's byte-level symbol
	// added are the added tokens matched in the raw text; addedNorm those matched after
	// normalization (tokenizer.json's "normalized": true).
	added, addedNorm []addedToken
	nfc              bool // the NFC normalizer
	addPrefixSpace   bool // ByteLevel's add_prefix_space
	ignoreMerges     bool // a piece that is a token as a whole is that token (Llama 3's BPE)
	// prefix and suffix are the post-processor's tokens around a text ([<s>], [</s>]).
	prefix, suffix []int64
	pad            int64
	maxLength      int
}

type merge struct {
	rank int32
	id   int32
}

// addedToken is one of tokenizer.json's added_tokens, with the options that change where it
// matches: lstrip and rstrip take the whitespace beside it into the token, single_word
// matches it only between non-word characters.
type addedToken struct {
	content                    string
	id                         int64
	lstrip, rstrip, singleWord bool
}

// Encode returns text's ids: the post-processor's prefix, text's tokens, its suffix, with the
// tokens cut to leave MaxLength ids in all, as Hugging Face's truncation cuts them.
func (b *BPE) Encode(text string) []int64 {
	limit := -1
	if b.maxLength > 0 {
		limit = b.maxLength - len(b.prefix) - len(b.suffix)
	}
	ids := append(make([]int64, 0, 32), b.prefix...)
	ids = b.appendText(ids, text, limit)
	return append(ids, b.suffix...)
}

// Tokenize returns text's tokens, without the post-processor's and untruncated, in the
// vocabulary's byte-level spelling ("Ġworld" for " world"), as Hugging Face's tokenize().
func (b *BPE) Tokenize(text string) []string {
	ids := b.appendText(nil, text, -1)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = b.tokens[id]
	}
	return out
}

// Check reports ids that a model built for this vocabulary cannot take: an id outside it, or
// more ids than MaxLength.
func (b *BPE) Check(ids []int64) error {
	if b.maxLength > 0 && len(ids) > b.maxLength {
		return fmt.Errorf("%d ids exceed the maximum length of %d", len(ids), b.maxLength)
	}
	for i, id := range ids {
		if id < 0 || id >= int64(len(b.tokens)) {
			return fmt.Errorf("id %d at position %d is outside the vocabulary of %d tokens", id, i, len(b.tokens))
		}
	}
	return nil
}

// Batch pads seqs with the pad token to the longest one, as WordPiece.Batch.
func (b *BPE) Batch(seqs [][]int64) (ids, mask []int64, width int) {
	return padBatch(seqs, b.pad)
}

// Token returns the vocabulary's token for id, in its byte-level spelling ("" outside it).
func (b *BPE) Token(id int64) string {
	if id < 0 || id >= int64(len(b.tokens)) {
		return ""
	}
	return b.tokens[id]
}

// PadID is the id that pads a batch: the tokenizer.json's padding token, else <pad>.
func (b *BPE) PadID() int64 { return b.pad }

// appendText appends at most limit (-1: all) of text's token ids to ids. It stops reading text
// once the limit is reached.
func (b *BPE) appendText(ids []int64, text string, limit int) []int64 {
	if !utf8.ValidString(text) {
		// Hugging Face takes only valid strings; Python's decode would give U+FFFD too.
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	start := len(ids)
	full := func() bool { return limit >= 0 && len(ids)-start >= limit }
	splitAdded(text, b.added, func(seg string, id int64) bool {
		if id >= 0 {
			ids = append(ids, id)
			return !full()
		}
		if b.nfc {
			seg = norm.NFC.String(seg)
		}
		splitAdded(seg, b.addedNorm, func(seg string, id int64) bool {
			if id >= 0 {
				ids = append(ids, id)
			} else {
				ids = b.appendSegment(ids, seg, start, limit)
			}
			return !full()
		})
		return !full()
	})
	if limit >= 0 && len(ids)-start > limit {
		ids = ids[:start+limit]
	}
	return ids
}

// appendSegment appends the ids of text without added tokens: GPT-2's pieces, each merged.
func (b *BPE) appendSegment(ids []int64, text string, start, limit int) []int64 {
	if text == "" {
		return ids
	}
	if b.addPrefixSpace && text[0] != ' ' {
		text = " " + text
	}
	sc := bpePool.Get().(*bpeScratch)
	defer bpePool.Put(sc)
	for len(text) > 0 && (limit < 0 || len(ids)-start < limit) {
		n := gpt2Piece(text)
		ids = b.appendPiece(ids, text[:n], sc)
		text = text[n:]
	}
	return ids
}

// bpeScratch holds the buffers one piece's merging reuses.
type bpeScratch struct {
	syms []symbol
	heap mergeHeap
	word []byte
}

var bpePool = sync.Pool{New: func() any { return new(bpeScratch) }}

// symbol is one of a piece's symbols while it is merged: a token id, and its live neighbours
// (-1: none). A symbol merged into its left neighbour is gone.
type symbol struct {
	id         int64
	prev, next int32
	gone       bool
}

// appendPiece appends the ids of one of GPT-2's pieces: its bytes' symbols, merged as the
// tokenizers library merges them: always the pair of lowest rank, the leftmost of equal ones.
func (b *BPE) appendPiece(ids []int64, piece string, sc *bpeScratch) []int64 {
	if b.ignoreMerges {
		sc.word = appendByteLevel(sc.word[:0], piece)
		if id, ok := b.vocab[string(sc.word)]; ok {
			return append(ids, id)
		}
	}
	syms := sc.syms[:0]
	for i := 0; i < len(piece); i++ {
		syms = append(syms, symbol{id: b.byteIDs[piece[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeAt{m.rank, int32(i), m.id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if s.gone || s.next < 0 {
			continue
		}
		r := &syms[s.next]
		// The pair may have changed since it was queued: merge only what is still there.
		if m, ok := b.merges[pairKey(s.id, r.id)]; !ok || m.id != top.id {
			continue
		}
		s.id, r.gone, s.next = int64(top.id), true, r.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
			if m, ok := b.merges[pairKey(s.id, syms[s.next].id)]; ok {
				h.push(mergeAt{m.rank, top.pos, m.id})
			}
		}
		if s.prev >= 0 {
			if m, ok := b.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h.push(mergeAt{m.rank, s.prev, m.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	sc.syms, sc.heap = syms, h
	return ids
}

func pairKey(left, right int64) uint64 { return uint64(left)<<32 | uint64(uint32(right)) }

// mergeAt is a queued merge of the symbol at pos with its right neighbour into id.
type mergeAt struct {
	rank, pos, id int32
}

// mergeHeap is a binary min-heap of merges by rank, then position.
type mergeHeap []mergeAt

func (m mergeAt) less(o mergeAt) bool { return m.rank < o.rank || m.rank == o.rank && m.pos < o.pos }

func (h *mergeHeap) push(m mergeAt) {
	*h = append(*h, m)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeAt {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && a[l].less(a[small]) {
			small = l
		}
		if l+1 < n && a[l+1].less(a[small]) {
			small = l + 1
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
	return top
}

// padBatch pads seqs with pad to the longest one and returns them row-major with their
// attention mask (1 for a token, 0 for padding): both [len(seqs), width].
func padBatch(seqs [][]int64, pad int64) (ids, mask []int64, width int) {
	for _, s := range seqs {
		width = max(width, len(s))
	}
	ids = make([]int64, len(seqs)*width)
	mask = make([]int64, len(seqs)*width)
	for i, s := range seqs {
		row := ids[i*width : (i+1)*width]
		copy(row, s)
		for j := len(s); j < width; j++ {
			row[j] = pad
		}
		m := mask[i*width : i*width+len(s)]
		for j := range m {
			m[j] = 1
		}
	}
	return ids, mask, width
}
