// Package npy reads and writes NumPy .npy arrays (format versions 1.0–3.0) as raw
// little-endian bytes, so a tensor can be built over them without converting elements.
//
// It is written here rather than taken from github.com/sbinet/npyio because that package
// decodes element by element into typed Go slices through reflection; torchd needs the bytes
// as they are, plus strict validation of untrusted headers.
package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Array is an n-dimensional C-order array with little-endian elements.
type Array struct {
	DType string  // float32, float16, float64, int64, int32, int16, uint8, int8, bool
	Shape []int64 // empty for a scalar
	Data  []byte
}

var magic = []byte("\x93NUMPY")

// ErrFormat wraps every error about malformed input.
var ErrFormat = errors.New("npy: malformed array")

var descrs = map[string]string{
	"<f4": "float32", "<f2": "float16", "<f8": "float64",
	"<i8": "int64", "<i4": "int32", "<i2": "int16",
	"|u1": "uint8", "<u1": "uint8", "|i1": "int8", "<i1": "int8", "|b1": "bool",
}

var sizes = map[string]int{
	"float32": 4, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2, "uint8": 1, "int8": 1, "bool": 1,
}

// maxElements bounds the element count a header may declare, far above any model input,
// so that a hostile shape cannot overflow the size computation.
const maxElements = 1 << 40

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// Decode parses an .npy file. Data aliases b.
func Decode(b []byte) (Array, error) {
	if len(b) < 10 || !bytes.Equal(b[:6], magic) {
		return Array{}, formatErr("missing \\x93NUMPY magic")
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return Array{}, formatErr("truncated header")
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return Array{}, formatErr("unsupported format version %d.%d", b[6], b[7])
	}
	if hlen > len(b)-start {
		return Array{}, formatErr("header length %d exceeds the data", hlen)
	}
	header := string(b[start : start+hlen])
	descr, err := field(header, "descr")
	if err != nil {
		return Array{}, err
	}
	order, err := field(header, "fortran_order")
	if err != nil {
		return Array{}, err
	}
	shapeStr, err := field(header, "shape")
	if err != nil {
		return Array{}, err
	}
	a := Array{}
	d, ok := descrs[strings.Trim(descr, "'\"")]
	if !ok {
		return Array{}, formatErr("unsupported dtype %s (want little-endian float16/32/64, int8/16/32/64, uint8 or bool)", descr)
	}
	a.DType = d
	if order != "False" {
		return Array{}, formatErr("fortran_order arrays are not supported; send C order")
	}
	if a.Shape, err = parseShape(shapeStr); err != nil {
		return Array{}, err
	}
	n := int64(1)
	for _, s := range a.Shape {
		if s < 0 || (s != 0 && n > maxElements/s) {
			return Array{}, formatErr("shape %v is too large", a.Shape)
		}
		n *= s
	}
	want := n * int64(sizes[d])
	data := b[start+hlen:]
	if int64(len(data)) != want {
		return Array{}, formatErr("shape %v of %s needs %d data bytes, got %d", a.Shape, d, want, len(data))
	}
	a.Data = data
	return a, nil
}

// field extracts the value of key from the header's Python dict literal.
func field(header, key string) (string, error) {
	i := strings.Index(header, "'"+key+"'")
	if i < 0 {
		return "", formatErr("header has no %q", key)
	}
	rest := strings.TrimSpace(header[i+len(key)+2:])
	if !strings.HasPrefix(rest, ":") {
		return "", formatErr("header key %q has no value", key)
	}
	rest = strings.TrimSpace(rest[1:])
	if strings.HasPrefix(rest, "(") {
		end := strings.Index(rest, ")")
		if end < 0 {
			return "", formatErr("unterminated shape tuple")
		}
		return rest[:end+1], nil
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return "", formatErr("unterminated value for %q", key)
	}
	return strings.TrimSpace(rest[:end]), nil
}

func parseShape(s string) ([]int64, error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, "("), ")"))
	shape := []int64{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSuffix(part, "L"), 10, 64)
		if err != nil || v < 0 {
			return nil, formatErr("bad shape entry %q", part)
		}
		shape = append(shape, v)
	}
	return shape, nil
}

// Encode writes a version 1.0 .npy file.
func Encode(a Array) ([]byte, error) {
	var descr string
	for k, v := range descrs {
		if v == a.DType && (k[0] == '<' || k == "|u1" || k == "|i1" || k == "|b1") {
			descr = k
			break
		}
	}
	if descr == "" {
		return nil, fmt.Errorf("npy: cannot encode dtype %q", a.DType)
	}
	if a.DType == "uint8" {
		descr = "|u1"
	} else if a.DType == "int8" {
		descr = "|i1"
	}
	dims := make([]string, len(a.Shape))
	for i, d := range a.Shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	shape := strings.Join(dims, ", ")
	if len(a.Shape) == 1 {
		shape += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	// Pad so that magic + version + length + header + '\n' is a multiple of 64.
	total := 10 + len(h) + 1
	h += strings.Repeat(" ", (64-total%64)%64) + "\n"
	out := make([]byte, 0, 10+len(h)+len(a.Data))
	out = append(out, magic...)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	out = append(out, h...)
	return append(out, a.Data...), nil
}
