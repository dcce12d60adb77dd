package oip

import (
	"encoding/json"
	"strconv"
)

// fastHeader parses the request header that clients send most (an object of "id",
// "parameters", "inputs" and "outputs"; inputs of "name", "shape", "datatype", "parameters"
// and "data"), in one pass over its bytes, where encoding/json would validate the whole
// header, then decode it, then skip each data array: three passes over a body that is mostly
// numbers. A data array after its tensor's shape and datatype is parsed in place, else left
// raw for decodeTensors; either way strictly (parseData: JSON's number grammar).
//
// It returns ok false for anything else, valid or not: a key it does not know or seen twice,
// a string with an escape or a byte outside ASCII, data holding strings or objects, a value
// of the wrong kind. The caller then decodes with encoding/json, so what is accepted and
// every error message stay as they were. Whatever it accepts, encoding/json decodes to the
// same values (FuzzFastHeader checks this).
func fastHeader(b []byte) (id string, params Parameters, inputs []wireTensor, outputs []RequestOutput, ok bool) {
	p := headerScanner{src: b}
	var seen [4]bool
	ok = p.object(func(key string) bool {
		switch key {
		case "id":
			if seen[0] {
				return false
			}
			seen[0] = true
			s, ok := p.str()
			id = s
			return ok
		case "parameters":
			if seen[1] {
				return false
			}
			seen[1] = true
			return p.raw(&params)
		case "inputs":
			if seen[2] {
				return false
			}
			seen[2] = true
			return p.inputs(&inputs)
		case "outputs":
			if seen[3] {
				return false
			}
			seen[3] = true
			return p.raw(&outputs)
		}
		return false
	})
	if !ok {
		return "", nil, nil, nil, false
	}
	if p.space(); p.pos != len(p.src) {
		return "", nil, nil, nil, false
	}
	return id, params, inputs, outputs, true
}

type headerScanner struct {
	src []byte
	pos int
}

func (p *headerScanner) space() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c, moving past it if so.
func (p *headerScanner) next(c byte) bool {
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// object parses an object whose values field parses, given each key; false if it is not one.
func (p *headerScanner) object(field func(key string) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.next(':') || !field(key) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// str parses a string of printable ASCII with no escape: the same bytes encoding/json
// would decode to.
func (p *headerScanner) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			s := string(p.src[start:p.pos])
			p.pos++
			return s, true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return "", false
		}
		p.pos++
	}
	return "", false
}

// raw decodes the value at p.pos into v with encoding/json: parameters and requested outputs
// are small and of many shapes.
func (p *headerScanner) raw(v any) bool {
	p.space()
	start := p.pos
	if !p.skip() {
		return false
	}
	return json.Unmarshal(p.src[start:p.pos], v) == nil
}

// skip moves past the value at p.pos, an object, array or string, by its brackets and
// quotes; its content is for encoding/json to check. Non-ASCII bytes are refused, since the
// header as a whole must be UTF-8, which encoding/json does not check.
func (p *headerScanner) skip() bool {
	if p.pos >= len(p.src) {
		return false
	}
	depth := 0
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		switch {
		case c >= 0x80:
			return false
		case c == '"':
			for p.pos < len(p.src) && p.src[p.pos] != '"' {
				if p.src[p.pos] >= 0x80 {
					return false
				}
				if p.src[p.pos] == '\\' {
					p.pos++
				}
				p.pos++
			}
			if p.pos >= len(p.src) {
				return false
			}
			p.pos++
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		}
		if depth <= 0 {
			// A scalar other than a string runs to its delimiter; these fields take none.
			return depth == 0 && (c == '"' || c == '}' || c == ']')
		}
	}
	return false
}

func (p *headerScanner) inputs(out *[]wireTensor) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		*out = []wireTensor{}
		return true
	}
	for {
		var w wireTensor
		var seen [5]bool
		once := func(i int) bool {
			if seen[i] {
				return false
			}
			seen[i] = true
			return true
		}
		ok := p.object(func(key string) bool {
			switch key {
			case "name":
				var ok bool
				w.Name, ok = p.str()
				return once(0) && ok
			case "shape":
				return once(1) && p.shape(&w.Shape)
			case "datatype":
				var ok bool
				w.Datatype, ok = p.str()
				return once(2) && ok
			case "parameters":
				return once(3) && p.raw(&w.Parameters)
			case "data":
				if !once(4) {
					return false
				}
				// Parsed in place when the shape and datatype came first, as clients write
				// them; else scanned for decodeTensors to parse.
				if w.Shape != nil && w.Datatype != "" && w.Datatype != "BYTES" && jsonable(w.Datatype) && DatatypeSize(w.Datatype) > 0 {
					return p.parsed(&w)
				}
				return p.data(&w.Data)
			}
			return false
		})
		if !ok {
			return false
		}
		*out = append(*out, w)
		if p.next(',') {
			continue
		}
		return p.next(']')
	}
}

// shape parses an array of integers as encoding/json decodes them into []int64: no fraction
// or exponent, within int64, "[]" as an empty slice rather than nil.
func (p *headerScanner) shape(out *[]int64) bool {
	if !p.next('[') {
		return false
	}
	s := []int64{}
	if p.next(']') {
		*out = s
		return true
	}
	for {
		p.space()
		start := p.pos
		if p.pos < len(p.src) && p.src[p.pos] == '-' {
			p.pos++
		}
		digits := p.pos
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		// JSON has no leading zeros; "-0" is 0.
		if p.pos == digits || p.src[digits] == '0' && p.pos-digits > 1 {
			return false
		}
		v, err := strconv.ParseInt(string(p.src[start:p.pos]), 10, 64)
		if err != nil {
			return false
		}
		s = append(s, v)
		if p.next(',') {
			continue
		}
		if !p.next(']') {
			return false
		}
		*out = s
		return true
	}
}

// parsed parses w's data array in place, strictly (parseDataAt), into w.parsed.
func (p *headerScanner) parsed(w *wireTensor) bool {
	n, err := ElementCount(w.Shape)
	if err != nil || n > maxInt/int64(DatatypeSize(w.Datatype)) {
		return false
	}
	p.space()
	out, end, err := parseDataAt(p.src[p.pos:], w.Shape, n, w.Datatype, true)
	if err != nil {
		return false
	}
	w.Data = p.src[p.pos : p.pos+end : p.pos+end]
	w.parsed = out
	p.pos += end
	return true
}

// data takes the raw data array: its brackets matched, and only the bytes of numbers, true
// and false, commas and white space inside; parseData checks the rest strictly.
func (p *headerScanner) data(out *json.RawMessage) bool {
	if !p.next('[') {
		return false
	}
	start := p.pos - 1
	depth := 1
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		switch c {
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				*out = p.src[start:p.pos:p.pos]
				return true
			}
		default:
			if !dataByte[c] {
				return false
			}
		}
	}
	return false
}

// dataByte: the bytes of numbers, true and false, commas and white space.
var dataByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789-+.eE, \t\n\rtruefals") {
		t[c] = true
	}
	return t
}()

// jsonNumber reports whether tok is a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(tok []byte) bool {
	i, n := 0, len(tok)
	if i < n && tok[i] == '-' {
		i++
	}
	switch {
	case i < n && tok[i] == '0':
		i++
	case i < n && tok[i] >= '1' && tok[i] <= '9':
		for i < n && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < n && tok[i] == '.' {
		i++
		d := i
		for i < n && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < n && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < n && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		d := i
		for i < n && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == n
}
