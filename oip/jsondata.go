package oip

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/torchd/torchd/internal/jsonfloat"
)

// parseData converts a tensor's JSON "data" array, already validated as JSON by encoding/json,
// to the bytes of datatype. n is the shape's element count. The array is either flat or
// nested exactly as shape; any other nesting is an error rather than a guess at the layout.
//
// It converts each number straight from its text, so INT64 and UINT64 keep every digit and a
// value that the datatype cannot hold exactly (300 as UINT8, 1.5 as INT32) is an error.
//
// strict: raw has not been validated, only scanned by fastHeader (numbers, true, false and
// brackets); a number outside JSON's grammar is then an error too (errSyntax), which
// strconv would take ("01", "1.", "-.5").
func parseData(raw []byte, shape []int64, n int64, datatype string, strict bool) ([]byte, error) {
	out, end, err := parseDataAt(raw, shape, n, datatype, strict)
	if err != nil {
		return nil, err
	}
	if strict && end != len(raw) { // not strict, parseDataAt has checked for white space only
		return nil, errors.New("data has trailing characters")
	}
	return out, nil
}

// parseDataAt is parseData of the array at the start of raw, which may go on after it (the
// rest of a header): it returns where the array ends. Strict, it validates the array as JSON,
// for fastHeader.
func parseDataAt(raw []byte, shape []int64, n int64, datatype string, strict bool) (_ []byte, end int, _ error) {
	p := dataParser{src: raw, want: n, datatype: datatype, size: DatatypeSize(datatype), strict: strict}
	// Every element takes at least one byte of JSON, so a shape that claims more elements
	// than raw has bytes is wrong, and checking it first bounds the allocation below by the
	// body's size.
	if n > int64(len(raw)) {
		return nil, 0, fmt.Errorf("shape %v needs %d elements but the data cannot hold that many", shape, n)
	}
	if p.size > 0 {
		p.out = make([]byte, n*int64(p.size))
	}
	p.dims = make([]int64, max(1, len(shape)))
	for i := range p.dims {
		p.dims[i] = -1
	}
	p.leafDepth = -1
	p.space()
	if p.pos >= len(p.src) || p.src[p.pos] != '[' {
		return nil, 0, errors.New("data must be an array")
	}
	if err := p.array(1); err != nil {
		return nil, 0, err
	}
	end = p.pos
	p.space()
	if p.pos != len(p.src) && !strict {
		return nil, 0, errors.New("data has trailing characters")
	}
	depth := 0
	for depth < len(p.dims) && p.dims[depth] >= 0 {
		depth++
	}
	if depth > 1 {
		if depth != len(shape) || !slices.Equal(p.dims, shape) {
			return nil, 0, fmt.Errorf("data is nested as %v but the shape is %v; send it flat or nested as the shape", p.dims[:depth], shape)
		}
	}
	if p.n != n {
		return nil, 0, fmt.Errorf("data has %d elements but shape %v needs %d", p.n, shape, n)
	}
	return p.out, end, nil
}

type dataParser struct {
	src      []byte
	pos      int
	datatype string
	size     int
	out      []byte
	n, want  int64
	// dims[d] is the length of every array at depth d+1, once one has closed; -1 before.
	// leafDepth is the depth of the arrays holding the elements, once one has been seen.
	dims      []int64
	leafDepth int
	strict    bool
}

func (p *dataParser) space() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

var errSyntax = errors.New("malformed data array")

// array parses the array at p.pos, at depth (1 for the outermost).
func (p *dataParser) array(depth int) error {
	if depth > len(p.dims) {
		return fmt.Errorf("data is nested deeper than the shape's %d dimensions", len(p.dims))
	}
	p.pos++ // '['
	var length int64
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		return p.closed(depth, 0)
	}
	for {
		p.space()
		if p.pos >= len(p.src) {
			return errSyntax
		}
		if p.src[p.pos] == '[' {
			if p.leafDepth != -1 && p.leafDepth <= depth {
				return errors.New("ragged data: arrays and elements mixed at one level")
			}
			if err := p.array(depth + 1); err != nil {
				return err
			}
		} else {
			if p.leafDepth == -1 {
				if depth < len(p.dims) && p.dims[depth] != -1 {
					return errors.New("ragged data: arrays and elements mixed at one level")
				}
				p.leafDepth = depth
			} else if p.leafDepth != depth {
				return errors.New("ragged data: elements at different depths")
			}
			if err := p.element(); err != nil {
				return err
			}
		}
		length++
		p.space()
		if p.pos >= len(p.src) {
			return errSyntax
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return p.closed(depth, length)
		default:
			return errSyntax
		}
	}
}

// closed records the length of an array at depth, which every array at that depth must share.
func (p *dataParser) closed(depth int, length int64) error {
	switch d := &p.dims[depth-1]; {
	case *d == -1:
		*d = length
	case *d != length:
		return fmt.Errorf("ragged data: arrays of length %d and %d at depth %d", *d, length, depth)
	}
	return nil
}

// token returns the scalar at p.pos and moves past it.
func (p *dataParser) token() []byte {
	start := p.pos
	if p.src[p.pos] == '"' {
		p.pos++
		for p.pos < len(p.src) {
			switch p.src[p.pos] {
			case '\\':
				p.pos += 2
				continue
			case '"':
				p.pos++
				return p.src[start:min(p.pos, len(p.src))]
			}
			p.pos++
		}
		p.pos = len(p.src)
		return p.src[start:]
	}
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ',', ']', ' ', '\t', '\n', '\r', '[', '{', '"':
			return p.src[start:p.pos]
		}
		p.pos++
	}
	return p.src[start:]
}

// element converts the scalar at p.pos to the datatype and stores it.
func (p *dataParser) element() error {
	i := p.n
	if i >= p.want {
		return fmt.Errorf("data has more than the shape's %d elements", p.want)
	}
	if p.src[p.pos] == '{' {
		return fmt.Errorf("element %d: an object; elements are numbers, bools or strings", i)
	}
	if p.datatype == "FP32" {
		if f, end, ok := float32At(p.src, p.pos); ok {
			binary.LittleEndian.PutUint32(p.out[i*4:], math.Float32bits(f))
			p.pos = end
			p.n++
			return nil
		}
	}
	tok := p.token()
	if len(tok) == 0 {
		return errSyntax
	}
	p.n++
	err := p.store(i, tok)
	if err != nil {
		return fmt.Errorf("element %d: %w", i, err)
	}
	return nil
}

func (p *dataParser) store(i int64, tok []byte) error {
	// string(tok) is converted at each call rather than once so that it stays on the stack:
	// a string kept for an error message would cost an allocation per element.
	if p.datatype == "BYTES" {
		if tok[0] != '"' {
			return fmt.Errorf("BYTES data must be strings, got %.20s", tok)
		}
		str, err := unquote(tok)
		if err != nil {
			return err
		}
		if uint64(len(str)) > math.MaxUint32 {
			return errors.New("BYTES element longer than 4 GiB")
		}
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(str)))
		p.out = append(p.out, str...)
		return nil
	}
	if p.datatype == "BOOL" {
		switch string(tok) {
		case "true":
			p.out[i] = 1
		case "false":
			p.out[i] = 0
		default:
			return fmt.Errorf("BOOL data must be true or false, got %.20s", tok)
		}
		return nil
	}
	if c := tok[0]; c != '-' && (c < '0' || c > '9') {
		return fmt.Errorf("%s data must be numbers, got %.20s", p.datatype, tok)
	}
	if p.strict && !jsonNumber(tok) {
		return errSyntax
	}
	o := p.out[i*int64(p.size):]
	switch p.datatype {
	case "INT8", "INT16", "INT32", "INT64":
		v, err := parseInt(string(tok), p.size*8)
		if err != nil {
			return fmt.Errorf("%.30s as %s: %w", tok, p.datatype, err)
		}
		putUint(o, p.size, uint64(v))
	case "UINT8", "UINT16", "UINT32", "UINT64":
		v, err := parseUint(string(tok), p.size*8)
		if err != nil {
			return fmt.Errorf("%.30s as %s: %w", tok, p.datatype, err)
		}
		putUint(o, p.size, v)
	case "FP32":
		f, err := strconv.ParseFloat(string(tok), 32)
		if err != nil {
			return fmt.Errorf("%.30s as FP32: %w", tok, numError(err))
		}
		binary.LittleEndian.PutUint32(o, math.Float32bits(float32(f)))
	case "FP64":
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return fmt.Errorf("%.30s as FP64: %w", tok, numError(err))
		}
		binary.LittleEndian.PutUint64(o, math.Float64bits(f))
	default:
		return fmt.Errorf("%s cannot be JSON data", p.datatype)
	}
	return nil
}

// float32At parses the JSON number at src[pos:] as FP32, in one pass instead of three (find
// the token, check JSON's grammar, strconv.ParseFloat), when the number ends at a delimiter,
// has at most 19 significant digits and a power of ten within 22: as clients print float32s,
// "-0.1321", and Python's float64 repr of them, "0.6403999924659729". ok false: anything
// else, for token and store. The result is ParseFloat's, bit for bit:
//   - up to 7 digits and 1e±10, the digits and the power are exact float32s and one float32
//     multiplication or division rounds correctly (ParseFloat's own exact case);
//   - else the float64 quotient or product is within about one float64 ulp of the number, so
//     rounding it to float32 rounds the number itself unless it lies within a few ulps of a
//     halfway point between two float32s, which goes to ParseFloat.
func float32At(src []byte, pos int) (f float32, end int, ok bool) {
	i, n := pos, len(src)
	neg := i < n && src[i] == '-'
	if neg {
		i++
	}
	var mant uint64
	digits, exp := 0, 0
	switch {
	case i < n && src[i] == '0':
		i++
	case i < n && src[i] >= '1' && src[i] <= '9':
		for ; i < n && src[i] >= '0' && src[i] <= '9'; i++ {
			mant = mant*10 + uint64(src[i]-'0')
			digits++
			if digits > 19 {
				return 0, 0, false
			}
		}
	default:
		return 0, 0, false
	}
	if i < n && src[i] == '.' {
		i++
		start := i
		for i < n && src[i] >= '0' && src[i] <= '9' {
			// Eight digits at a time where there are eight (Python's 17-digit reprs).
			if mant != 0 && digits+8 <= 19 && n-i >= 8 {
				if v, ok := eightDigits(src[i:]); ok {
					mant = mant*100000000 + v
					digits += 8
					exp -= 8
					i += 8
					continue
				}
			}
			exp--
			if mant == 0 && src[i] == '0' {
				i++
				continue // a leading zero: no significant digit yet
			}
			mant = mant*10 + uint64(src[i]-'0')
			digits++
			if digits > 19 {
				return 0, 0, false
			}
			i++
		}
		if i == start {
			return 0, 0, false
		}
	}
	if i < n && (src[i] == 'e' || src[i] == 'E') {
		i++
		eneg := false
		if i < n && (src[i] == '+' || src[i] == '-') {
			eneg = src[i] == '-'
			i++
		}
		start, e := i, 0
		for ; i < n && src[i] >= '0' && src[i] <= '9'; i++ {
			if i-start >= 3 {
				return 0, 0, false
			}
			e = e*10 + int(src[i]-'0')
		}
		if i == start {
			return 0, 0, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if i < n {
		switch src[i] {
		case ',', ']', ' ', '\t', '\n', '\r':
		default:
			return 0, 0, false
		}
	}
	switch {
	case mant == 0:
		f = 0
	case digits <= 7 && exp >= -10 && exp <= 10:
		// 7 digits are below 2^24, exact in a float32, as are the powers of ten to 1e10.
		f = float32(mant)
		if exp > 0 {
			f *= float32pow10[exp]
		} else if exp < 0 {
			f /= float32pow10[-exp]
		}
	case exp >= -22 && exp <= 22:
		d := float64(mant)
		if exp > 0 {
			d *= float64pow10[exp]
		} else if exp < 0 {
			d /= float64pow10[-exp]
		}
		bits := math.Float64bits(d)
		// float32's normal range, short of its largest powers, which could round up to +Inf.
		if e2 := int(bits>>52&0x7ff) - 1023; e2 < -126 || e2 > 126 {
			return 0, 0, false
		}
		// The 29 bits float32 drops: a halfway point is 1 followed by 28 zeros.
		const half, margin = 1 << 28, 16
		if low := int64(bits & (1<<29 - 1)); low > half-margin && low < half+margin {
			return 0, 0, false
		}
		f = float32(d)
	default:
		return 0, 0, false
	}
	if neg {
		f = -f
	}
	return f, i, true
}

// eightDigits is the value of the eight ASCII digits at the start of b, in a few
// multiplications instead of eight, or ok false if they are not all digits.
func eightDigits(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b)
	// Each byte 0x30-0x39: its high nibble is 3, and adding 6 keeps it 3.
	if v&0xF0F0F0F0F0F0F0F0|(v+0x0606060606060606)&0xF0F0F0F0F0F0F0F0>>4 != 0x3333333333333333 {
		return 0, false
	}
	v -= 0x3030303030303030
	v = v*10 + v>>8 // pairs of digits in every other byte
	v = ((v&0x000000FF000000FF)*(100+1000000<<32) + (v>>16&0x000000FF000000FF)*(1+10000<<32)) >> 32
	return v, true
}

var (
	float32pow10 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
	float64pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
		1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}
)

// unquote decodes a JSON string token; most have no escapes and need no decoder.
func unquote(tok []byte) ([]byte, error) {
	if len(tok) >= 2 && tok[len(tok)-1] == '"' {
		plain := true
		for _, c := range tok[1 : len(tok)-1] {
			if c == '\\' || c == '"' || c < 0x20 {
				plain = false
				break
			}
		}
		if plain {
			return tok[1 : len(tok)-1], nil
		}
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, errSyntax
	}
	return []byte(s), nil
}

var (
	errRange      = errors.New("out of range")
	errNotInteger = errors.New("not an integer")
)

func numError(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return errRange
	}
	return errors.New("not a number")
}

// isPlainInteger reports whether a JSON number has no fraction or exponent.
func isPlainInteger(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// integral parses a JSON number with a fraction or exponent that must still be a whole
// number, such as 2.0 or 1e3, and checks it lies in [lo, hi).
func integral(s string, lo, hi float64) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, numError(err)
	}
	if f != math.Trunc(f) {
		return 0, errNotInteger
	}
	if f < lo || f >= hi {
		return 0, errRange
	}
	return f, nil
}

func parseInt(s string, bits int) (int64, error) {
	if !isPlainInteger(s) {
		lim := math.Ldexp(1, bits-1)
		f, err := integral(s, -lim, lim)
		return int64(f), err
	}
	v, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, numError(err)
	}
	return v, nil
}

func parseUint(s string, bits int) (uint64, error) {
	if !isPlainInteger(s) {
		f, err := integral(s, 0, math.Ldexp(1, bits))
		if err != nil {
			return 0, err
		}
		if f >= math.Ldexp(1, 63) { // float64 to uint64 conversion is only defined below 2^63
			return uint64(f-math.Ldexp(1, 63)) | 1<<63, nil
		}
		return uint64(f), nil
	}
	if s[0] == '-' { // "-0" is zero; every other negative is out of range
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v != 0 {
			return 0, errRange
		}
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, numError(err)
	}
	return v, nil
}

func putUint(o []byte, size int, v uint64) {
	switch size {
	case 1:
		o[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(o, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(o, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(o, v)
	}
}

// appendData appends t's data as a flat JSON array. It returns ok false, with b unchanged,
// when JSON cannot carry the data exactly: FP16 and BF16, a NaN or infinity, or a BYTES
// element that is not UTF-8. The caller then sends the tensor binary, which every Triton
// client reads whether or not it asked for it.
func appendData(b []byte, t *Tensor) (_ []byte, ok bool) {
	mark := len(b)
	size := DatatypeSize(t.Datatype)
	d := t.Data
	b = append(b, '[')
	if t.Datatype == "BYTES" {
		for off, i := 0, 0; off+4 <= len(d); i++ {
			l := int(binary.LittleEndian.Uint32(d[off:]))
			s := d[off+4 : off+4+l]
			off += 4 + l
			if !utf8.Valid(s) {
				return b[:mark], false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		return append(b, ']'), true
	}
	if size <= 0 || !jsonable(t.Datatype) {
		return b[:mark], false
	}
	for i := 0; i+size <= len(d); i += size {
		if i > 0 {
			b = append(b, ',')
		}
		e := d[i:]
		switch t.Datatype {
		case "BOOL":
			b = strconv.AppendBool(b, e[0] != 0)
		case "UINT8":
			b = strconv.AppendUint(b, uint64(e[0]), 10)
		case "UINT16":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint16(e)), 10)
		case "UINT32":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(e)), 10)
		case "UINT64":
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(e), 10)
		case "INT8":
			b = strconv.AppendInt(b, int64(int8(e[0])), 10)
		case "INT16":
			b = strconv.AppendInt(b, int64(int16(binary.LittleEndian.Uint16(e))), 10)
		case "INT32":
			b = strconv.AppendInt(b, int64(int32(binary.LittleEndian.Uint32(e))), 10)
		case "INT64":
			b = strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(e)), 10)
		case "FP32":
			f := float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return b[:mark], false
			}
			b = jsonfloat.AppendFloat32(b, float32(f))
		case "FP64":
			f := math.Float64frombits(binary.LittleEndian.Uint64(e))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return b[:mark], false
			}
			b = jsonfloat.AppendFloat64(b, f)
		}
	}
	return append(b, ']'), true
}

// appendString appends s as a JSON string; s is valid UTF-8.
func appendString(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// DataJSON is t's data as a flat JSON array, or ok false where JSON cannot carry it exactly
// (see appendData).
func DataJSON(t Tensor) (_ []byte, ok bool) { return appendData(nil, &t) }
