package handlers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/torchd/torchd/torch"
)

// maxJSONElements bounds a JSON tensor; a larger one should be sent as .npy.
const maxJSONElements = 1 << 24

// maxJSONDepth bounds the nesting of a JSON tensor's lists.
const maxJSONDepth = 32

// decodeJSONTensor reads nested lists, or {"data", "shape", "dtype"} with flat or nested data,
// as float32 unless the object names its dtype.
func decodeJSONTensor(b []byte) (Tensor, error) { return decodeJSONTensorAs(b, torch.Float32) }

// decodeJSONTensorAs is decodeJSONTensor with dtype for the values whose dtype is not named:
// a declared int64 input takes nested lists of integers as int64.
//
// The lists are scanned byte by byte into the dtype's bytes: decoding them into []any first
// costs two allocations and about half a microsecond per number, which made a 6 MB array of
// zeros take 1.5 s of CPU to refuse.
func decodeJSONTensorAs(b []byte, dtype torch.DType) (Tensor, error) {
	// Unmarshal validates the whole body (syntax, nesting up to encoding/json's 10,000
	// levels), so the scanner below can trust the structure.
	var raw json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Tensor{}, BadInput("invalid JSON: %v", err)
	}
	raw = bytes.TrimSpace(raw)
	var shape []int64
	if raw[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return Tensor{}, BadInput("invalid JSON: %v", err)
		}
		data, ok := obj["data"]
		if !ok {
			return Tensor{}, BadInput(`a JSON tensor object needs "data" (and optionally "shape", "dtype")`)
		}
		var name string
		if json.Unmarshal(obj["dtype"], &name) == nil && name != "" {
			dt, err := torch.ParseDType(name)
			if err != nil {
				return Tensor{}, BadInput("%v", err)
			}
			if dt == torch.Float16 || dt == torch.BFloat16 {
				return Tensor{}, BadInput("dtype %s cannot travel as JSON numbers; send .npy", name)
			}
			dtype = dt
		}
		if rawShape, ok := obj["shape"]; ok {
			var list []json.Number
			if err := json.Unmarshal(rawShape, &list); err != nil || list == nil {
				return Tensor{}, BadInput(`"shape" must be a list of non-negative integers`)
			}
			for _, e := range list {
				n, err := strconv.ParseInt(string(e), 10, 64)
				if err != nil || n < 0 {
					return Tensor{}, BadInput(`"shape" must be a list of non-negative integers, got %v`, e)
				}
				shape = append(shape, n)
			}
			if shape == nil {
				shape = []int64{} // "shape": [] is a scalar
			}
		}
		raw = data
	}
	p := listScanner{b: raw, dt: dtype, size: dtype.Size()}
	if err := p.value(0); err != nil {
		return Tensor{}, err
	}
	nested := p.shape()
	if shape == nil {
		shape = nested
	} else {
		n := int64(1)
		for _, d := range shape {
			if d != 0 && n > maxJSONElements/d {
				return Tensor{}, BadInput("shape %v is too large for JSON; send .npy", shape)
			}
			n *= d
		}
		if n != int64(p.count) {
			return Tensor{}, BadInput("shape %v needs %d values, data has %d", shape, n, p.count)
		}
	}
	return Tensor{DType: dtype, Shape: shape, Data: p.out}, nil
}

// listScanner reads nested lists of numbers from valid JSON into dt's bytes, row-major, and
// checks they are rectangular: every list at one depth has the same length, and every number
// is at the same depth.
type listScanner struct {
	b     []byte
	i     int
	dt    torch.DType
	size  int
	out   []byte
	count int
	dims  []int64 // dims[d]: the length of the lists at depth d, -1 until one closes
	leaf  int     // the depth of the numbers; 0 until the first (a bare number is depth 0)
	seen  bool    // a number was read
}

// shape is the lists' nesting: the dims above the numbers.
func (p *listScanner) shape() []int64 {
	if p.seen {
		return append([]int64{}, p.dims[:p.leaf]...)
	}
	return append([]int64{}, p.dims...)
}

func (p *listScanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *listScanner) ragged() error {
	return BadInput("ragged JSON tensor: a number and a list at the same depth (after value %d)", p.count)
}

func (p *listScanner) value(depth int) error {
	if depth > maxJSONDepth {
		return BadInput("JSON tensor nested deeper than %d levels", maxJSONDepth)
	}
	p.space()
	if p.b[p.i] != '[' {
		return p.scalar(depth)
	}
	if p.seen && depth >= p.leaf {
		return p.ragged()
	}
	if depth == len(p.dims) {
		p.dims = append(p.dims, -1)
	}
	p.i++
	n := int64(0)
	p.space()
	if p.b[p.i] == ']' {
		p.i++
	} else {
		for {
			if err := p.value(depth + 1); err != nil {
				return err
			}
			n++
			p.space()
			c := p.b[p.i]
			p.i++
			if c == ']' {
				break
			}
			// c is ',': the JSON is valid.
		}
	}
	if p.dims[depth] == -1 {
		p.dims[depth] = n
	} else if p.dims[depth] != n {
		return BadInput("ragged JSON tensor: a list at depth %d has %d items, an earlier one %d", depth, n, p.dims[depth])
	}
	return nil
}

func (p *listScanner) scalar(depth int) error {
	if !p.seen {
		p.seen, p.leaf = true, depth
	}
	if depth != p.leaf || len(p.dims) > depth {
		return p.ragged()
	}
	start := p.i
	c := p.b[p.i]
	var tok []byte
	switch {
	case c == '-' || c >= '0' && c <= '9':
		for p.i < len(p.b) && isNumberByte(p.b[p.i]) {
			p.i++
		}
		tok = p.b[start:p.i]
	case c == 't':
		p.i += 4
		tok = []byte("1")
	case c == 'f':
		p.i += 5
		tok = []byte("0")
	default:
		kind := map[byte]string{'"': "a string", '{': "an object", 'n': "null"}[c]
		return BadInput("data[%d]: want a number, got %s", p.count, kind)
	}
	if p.count >= maxJSONElements {
		return BadInput("JSON tensor has more than %d values; send .npy", maxJSONElements)
	}
	n := len(p.out)
	p.out = append(p.out, make([]byte, p.size)...)
	if err := putJSONNumber(p.out[n:], p.dt, tok); err != nil {
		return BadInput("data[%d]: %v", p.count, err)
	}
	p.count++
	return nil
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// intRanges are the values each integer dtype (and bool) holds.
var intRanges = map[torch.DType][2]int64{
	torch.Int64: {math.MinInt64, math.MaxInt64}, torch.Int32: {math.MinInt32, math.MaxInt32},
	torch.Int8: {math.MinInt8, math.MaxInt8}, torch.Uint8: {0, math.MaxUint8}, torch.Bool: {0, 1},
}

// putJSONNumber stores the JSON number tok as dt. A value dt cannot hold is refused rather
// than wrapped or rounded to infinity: 1e300 as float32 would reach the model as +Inf, and
// 300 as uint8 as 44. string(tok) is converted at each use, not once, so that it stays on
// the stack instead of costing an allocation per number.
func putJSONNumber(b []byte, dt torch.DType, tok []byte) error {
	switch dt {
	case torch.Float32:
		f, err := strconv.ParseFloat(string(tok), 32)
		if err != nil {
			return fmt.Errorf("%.30s is out of range for float32", tok)
		}
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f)))
		return nil
	case torch.Float64:
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return fmt.Errorf("%.30s is out of range for float64", tok)
		}
		binary.LittleEndian.PutUint64(b, math.Float64bits(f))
		return nil
	}
	r, ok := intRanges[dt]
	if !ok {
		return fmt.Errorf("dtype %v cannot be sent as JSON; send .npy", dt)
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil {
		// 2.0 and 1e3 are whole numbers too; 2.5 is not.
		f, ferr := strconv.ParseFloat(string(tok), 64)
		if ferr != nil || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
			return fmt.Errorf("%.30s is not %v (an integer in [%d, %d])", tok, dt, r[0], r[1])
		}
		v = int64(f)
	}
	if v < r[0] || v > r[1] {
		return fmt.Errorf("%.30s is out of range for %v [%d, %d]", tok, dt, r[0], r[1])
	}
	switch dt {
	case torch.Int64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case torch.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	default:
		b[0] = byte(v)
	}
	return nil
}
