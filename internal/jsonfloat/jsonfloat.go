// Package jsonfloat writes floats as JSON numbers of a fixed length.
//
// Every response writer that prints floats uses it, so that one input's response has one
// length whatever it was batched with: a batched forward may differ from a single one in a
// float's last bits, and the shortest round-trip form ('g', -1) then changes the number of
// digits, and with it Content-Length (ab counts such answers as "Length" failures).
// Scientific notation with a fixed count of significant digits keeps the width fixed across
// powers of ten; only a change of sign, or a float64 crossing 1e±100 (a third exponent
// digit), changes it. The digits are enough to read the value back exactly: 9 for a
// float32, 17 for a float64.
package jsonfloat

import "strconv"

// AppendFloat32 appends f, a float32, with 9 significant digits ("-1.23456789e-02").
// f must be finite: JSON has no NaN or infinity.
func AppendFloat32(b []byte, f float32) []byte {
	return strconv.AppendFloat(b, float64(f), 'e', 8, 32)
}

// AppendFloat64 appends f with 17 significant digits ("1.2345678901234567e-02").
// f must be finite.
func AppendFloat64(b []byte, f float64) []byte {
	return strconv.AppendFloat(b, f, 'e', 16, 64)
}
