package text

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The character classes of BERT's BasicTokenizer (_is_whitespace, _is_control,
// _is_punctuation, _is_chinese_char), which Python answers from unicodedata. Go's tables are
// a newer Unicode (15.0 against Python 3.11's 14.0): only characters new in 15.0 differ.

func isWhitespace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r':
		return true
	case '\u2028', '\u2029':
		// Not BERT's whitespace, so they survive its cleanup, but Python's str.split, which
		// it then splits the text with, splits at them.
		return true
	}
	return r >= utf8.RuneSelf && unicode.Is(unicode.Zs, r)
}

// isControl is true for the characters BERT drops: Unicode's C categories, unassigned code
// points (Python's Cn) included, but not tab, newline and carriage return. Hugging Face's
// tokenizers keep unassigned code points.
func (w *WordPiece) isControl(r rune) bool {
	if r < utf8.RuneSelf {
		return (r < 0x20 || r == 0x7f) && r != '\t' && r != '\n' && r != '\r'
	}
	if w.opts.HuggingFace {
		return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) && !unicode.Is(hfPlain, r)
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

// isPunct is Unicode punctuation plus every ASCII non-alphanumeric symbol ($, +, ^, `, …),
// which BERT splits off too.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return 33 <= r && r <= 47 || 58 <= r && r <= 64 || 91 <= r && r <= 96 || 123 <= r && r <= 126
	}
	return unicode.IsPunct(r)
}

// isCJK is BERT's CJK Unified Ideographs blocks. Hangul, kana and CJK punctuation are not
// in them and are tokenized like any other script. Hugging Face's tokenizers start
// Extension E at U+2B920 where tokenization.py has U+2B820.
func (w *WordPiece) isCJK(r rune) bool {
	extE := rune(0x2B820)
	if w.opts.HuggingFace {
		extE = 0x2B920
	}
	return 0x4E00 <= r && r <= 0x9FFF || 0x3400 <= r && r <= 0x4DBF ||
		0x20000 <= r && r <= 0x2A6DF || 0x2A700 <= r && r <= 0x2B73F ||
		0x2B740 <= r && r <= 0x2B81F || extE <= r && r <= 0x2CEAF ||
		0xF900 <= r && r <= 0xFAFF || 0x2F800 <= r && r <= 0x2FA1F
}

// appendLower appends s lower-cased as Python's str.lower does it, which BERT uses: rune by
// rune, except that a capital sigma ending a word becomes final sigma (ς), not σ. (Python's
// one other multi-rune mapping, İ → i + U+0307, differs from Go's only by the combining mark,
// which accent stripping removes.)
func appendLower(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		if r == 'Σ' && finalSigma(s, i, size) {
			r = 'ς'
		} else {
			r = unicode.ToLower(r)
		}
		dst = utf8.AppendRune(dst, r)
		i += size
	}
	return dst
}

// appendLowerRunes appends s lower-cased rune by rune, as Rust's char::to_lowercase, which
// Hugging Face's tokenizers use: no final sigma.
func appendLowerRunes(dst, s []byte) []byte {
	for _, r := range string(s) {
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
	}
	return dst
}

// finalSigma is Unicode's Final_Sigma condition for the Σ at s[i:i+size], as CPython tests
// it: a cased letter before it and none after it, skipping case-ignorable characters.
func finalSigma(s []byte, i, size int) bool {
	before := false
	for j := i; j > 0; {
		r, n := utf8.DecodeLastRune(s[:j])
		j -= n
		if !caseIgnorable(r) {
			before = cased(r)
			break
		}
	}
	if !before {
		return false
	}
	for j := i + size; j < len(s); {
		r, n := utf8.DecodeRune(s[j:])
		j += n
		if !caseIgnorable(r) {
			return !cased(r)
		}
	}
	return true
}

func cased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.In(r, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is Unicode's Case_Ignorable: the categories Mn, Me, Cf, Lm and Sk, and the
// word-break classes MidLetter, MidNumLet and Single_Quote.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '\u00b7', '\u0387', '\u055f', '\u05f4', '\u2018', '\u2019', '\u2024',
		'\u2027', '\ufe13', '\ufe52', '\ufe55', '\uff07', '\uff0e', '\uff1a':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// appendStripAccents appends s in NFD without its nonspacing marks (Mn), except those in
// keep (nil: none): "é" becomes "e".
func appendStripAccents(dst, s []byte, keep *unicode.RangeTable) []byte {
	start := len(dst)
	dst = norm.NFD.Append(dst, s...)
	// Compact in place: the write position never passes the read position.
	out := dst[:start]
	for i := start; i < len(dst); {
		r, size := utf8.DecodeRune(dst[i:])
		if !unicode.Is(unicode.Mn, r) || keep != nil && unicode.Is(keep, r) {
			out = append(out, dst[i:i+size]...)
		}
		i += size
	}
	return out
}
