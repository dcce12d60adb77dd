package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// gpt2Piece returns the byte length of the match of GPT-2's pre-tokenizer pattern at the start
// of s (not empty), the pattern Hugging Face's ByteLevel pre-tokenizer splits with:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Go's regexp has no lookahead, so the pattern is followed by hand, alternative by alternative.
func gpt2Piece(s string) int {
	if s[0] == '\'' && len(s) > 1 {
		switch s[1] {
		case 's', 't', 'm', 'd':
			return 2
		}
		if len(s) > 2 {
			switch s[1:3] {
			case "re", "ve", "ll":
				return 3
			}
		}
	}
	r, n := utf8.DecodeRuneInString(s)
	at := 0
	if r == ' ' && len(s) > 1 {
		// " ?X+": the space goes with a run of letters, digits or other characters after it.
		if r2, n2 := utf8.DecodeRuneInString(s[1:]); !unicode.IsSpace(r2) {
			r, n, at = r2, n2, 1
		}
	}
	if c := runeClass(r); c != classSpace {
		end := at + n
		for end < len(s) {
			r, n := utf8.DecodeRuneInString(s[end:])
			if runeClass(r) != c {
				break
			}
			end += n
		}
		return end
	}
	// A run of whitespace: all of it at the end of s; else all but its last character, which
	// goes with what follows (\s+(?!\S)); a single one alone (\s+).
	end, last := 0, 0
	for end < len(s) {
		r, n := utf8.DecodeRuneInString(s[end:])
		if !unicode.IsSpace(r) {
			break
		}
		last = end
		end += n
	}
	if end == len(s) || last == 0 {
		return end
	}
	return last
}

const (
	classSpace = iota
	classLetter
	classNumber
	classOther
)

// runeClass is the class of r in GPT-2's pattern: \s, \p{L}, \p{N}, or none of them.
func runeClass(r rune) int {
	switch {
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	}
	return classOther
}

// byteLevel maps each byte to the character that stands for it in a byte-level vocabulary
// (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards, in order (a space is "Ġ", U+0120).
var byteLevel = func() (m [256]rune) {
	n := 0
	for b := range 256 {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

// appendByteLevel appends s's bytes in their byte-level spelling.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteLevel[s[i]])
	}
	return dst
}

// splitAdded splits text at the added tokens, as the tokenizers library's AddedVocabulary
// does: the leftmost match, the longest of those that start there, then on after it; a
// single_word token only between non-word characters; lstrip and rstrip take the whitespace
// beside the token into it. fn gets each segment between tokens (id -1) and each token's id
// (segment ""), in order, and stops the split by returning false.
func splitAdded(text string, tokens []addedToken, fn func(seg string, id int64) bool) {
	// next[i] is where tokens[i] next occurs at or after the search position (-1: nowhere
	// more), so that each token's occurrences are searched for once over the text.
	next := make([]int, len(tokens))
	for i := range next {
		next[i] = -2
	}
	search, from := 0, 0
	for {
		best := -1
		for i, t := range tokens {
			if next[i] == -1 {
				continue
			}
			if next[i] < search {
				j := strings.Index(text[search:], t.content)
				if j < 0 {
					next[i] = -1
					continue
				}
				next[i] = search + j
			}
			if best < 0 || next[i] < next[best] || next[i] == next[best] && len(t.content) > len(tokens[best].content) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		t := tokens[best]
		start, stop := next[best], next[best]+len(t.content)
		search = stop
		if t.singleWord && (endsWithWord(text[:start]) || startsWithWord(text[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(text[:start], unicode.IsSpace)), from)
		}
		if t.rstrip {
			stop = len(text) - len(strings.TrimLeftFunc(text[stop:], unicode.IsSpace))
		}
		if from < start && !fn(text[from:start], -1) {
			return
		}
		if !fn("", t.id) {
			return
		}
		from = stop
	}
	if from < len(text) {
		fn(text[from:], -1)
	}
}

// isWordRune is Rust's regex \w, which the tokenizers library's single_word uses: letters and
// other alphabetic characters, marks, decimal digits, connector punctuation, joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}
