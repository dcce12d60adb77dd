// Package jsonfloat writes floats as JSON numbers of a fixed length.
//
// Every response writer that prints floats uses it, so that one input's response has one
// length whatever it was batched with: a batched forward may differ from a single one in a
// float's last bits, and the shortest round-trip form ('g', -1) then changes the number of
// digits, and with it Content-Length (ab counts such answers as "Length" failures).
//
// A float is written in scientific notation with the shortest digits that read back as the
// same float, padded with zeros to a fixed count: 9 significant digits for a float32, 17 for
// a float64, the most either ever needs. So the width is fixed across powers of ten (only a
// change of sign, or a float64 crossing 1e±100, a third exponent digit, changes it), the
// value reads back exactly, and a float32 0.2 reads as 0.2, not 0.200000003, into a float64.
package jsonfloat

import "strconv"

// AppendFloat32 appends f, a float32, with 9 significant digits ("-1.23400000e-02").
// f must be finite: JSON has no NaN or infinity.
func AppendFloat32(b []byte, f float32) []byte { return appendFixed(b, float64(f), 32, 9) }

// AppendFloat64 appends f with 17 significant digits ("1.2345678901234567e-02").
// f must be finite.
func AppendFloat64(b []byte, f float64) []byte { return appendFixed(b, f, 64, 17) }

// appendFixed appends f's shortest round-trip digits in 'e' notation, the mantissa padded
// with zeros to digits significant digits.
func appendFixed(b []byte, f float64, bits, digits int) []byte {
	start := len(b)
	b = strconv.AppendFloat(b, f, 'e', -1, bits)
	e, n, dot := start, 0, false
	for ; b[e] != 'e'; e++ {
		switch c := b[e]; {
		case c == '.':
			dot = true
		case c >= '0' && c <= '9':
			n++
		}
	}
	if n >= digits {
		return b
	}
	var exp [8]byte // "e-308" at most
	k := copy(exp[:], b[e:])
	b = b[:e]
	if !dot {
		b = append(b, '.')
	}
	for ; n < digits; n++ {
		b = append(b, '0')
	}
	return append(b, exp[:k]...)
}
