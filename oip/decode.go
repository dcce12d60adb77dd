package oip

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"
)

// DecodeRequest parses an infer request body. headerLen is the Inference-Header-Content-Length value, or -1 when the header is absent (pure JSON).
// contentEncoding is the request's Content-Encoding ("", "gzip", "deflate"); the body is decompressed first, with a size limit maxBody.
// It returns the request and one Tensor per input, in input order: JSON "data" (flat or nested, numbers or bools or strings for BYTES) converted to bytes of the datatype, or binary data taken from the body in order (binary_data_size parameter). It validates: known datatype, shape non-negative and product not overflowing, element count/byte size equal to the shape, FP16/BF16 only binary, sizes not exceeding the body, no trailing bytes, duplicate input names.
//
// Every error about the body wraps ErrBadRequest. A headerLen of 0 (a raw binary request)
// returns ErrRawRequest: see DecodeRawRequest. maxBody <= 0 means DefaultMaxBody.
//
// The returned inputs have Data nil: the values are in the tensors. Nested JSON data must be
// nested exactly as the shape. The Data of a tensor sent as binary aliases body (or the
// decompressed copy of it), so nothing is copied per element; copy it if it must outlive body,
// as when the server's HTTP layer recycles request buffers.
func DecodeRequest(body []byte, headerLen int, contentEncoding string, maxBody int) (*InferRequest, []Tensor, error) {
	if headerLen == 0 {
		return nil, nil, ErrRawRequest
	}
	body, err := Decompress(body, contentEncoding, maxBody)
	if err != nil {
		return nil, nil, err
	}
	header, rest, err := splitBody(body, headerLen, ErrBadRequest)
	if err != nil {
		return nil, nil, err
	}
	// The common header in one pass; anything it does not take, or any error, is decoded
	// again by encoding/json, which says what is wrong.
	if id, params, inputs, outputs, ok := fastHeader(header); ok {
		if req, ts, err := requestOf(id, params, inputs, outputs, rest, true); err == nil {
			return req, ts, nil
		}
	}
	return slowRequest(header, rest)
}

// slowRequest decodes the header with encoding/json: every request, valid or not.
func slowRequest(header, rest []byte) (*InferRequest, []Tensor, error) {
	var w struct {
		ID         string          `json:"id"`
		Parameters Parameters      `json:"parameters"`
		Inputs     []wireTensor    `json:"inputs"`
		Outputs    []RequestOutput `json:"outputs"`
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD, in names and BYTES data too.
	if !utf8.Valid(header) {
		return nil, nil, errorf(ErrBadRequest, "request header is not valid UTF-8 (JSON must be)")
	}
	if err := json.Unmarshal(header, &w); err != nil {
		return nil, nil, errorf(ErrBadRequest, "invalid JSON in request header: %s", jsonProblem(err))
	}
	return requestOf(w.ID, w.Parameters, w.Inputs, w.Outputs, rest, false)
}

// requestOf checks a decoded header and converts its tensors, binary ones from rest; strict
// when the data arrays have not been validated as JSON.
func requestOf(id string, params Parameters, inputs []wireTensor, outputs []RequestOutput, rest []byte, strict bool) (*InferRequest, []Tensor, error) {
	if len(inputs) == 0 {
		return nil, nil, errorf(ErrBadRequest, "request has no inputs")
	}
	if b, ok := params[ParamBinaryDataOutput]; ok {
		if _, isBool := b.(bool); !isBool {
			return nil, nil, errorf(ErrBadRequest, "request parameter %s must be a bool, got %v", ParamBinaryDataOutput, b)
		}
	}
	seen := make(map[string]bool, len(outputs))
	for _, o := range outputs {
		if o.Name == "" {
			return nil, nil, errorf(ErrBadRequest, "requested output has no name")
		}
		if seen[o.Name] {
			return nil, nil, errorf(ErrBadRequest, "output %q requested twice", o.Name)
		}
		seen[o.Name] = true
		if b, ok := o.Parameters[ParamBinaryData]; ok {
			if _, isBool := b.(bool); !isBool {
				return nil, nil, errorf(ErrBadRequest, "output %q: parameter %s must be a bool, got %v", o.Name, ParamBinaryData, b)
			}
		}
	}
	ts, err := decodeTensors("input", inputs, rest, ErrBadRequest, strict)
	if err != nil {
		return nil, nil, err
	}
	req := &InferRequest{ID: id, Parameters: params, Inputs: make([]RequestInput, len(inputs)), Outputs: outputs}
	for i, in := range inputs {
		req.Inputs[i] = RequestInput{Name: in.Name, Shape: in.Shape, Datatype: in.Datatype, Parameters: in.Parameters}
	}
	return req, ts, nil
}

// DecodeRawRequest decodes a raw binary request (Inference-Header-Content-Length: 0): the
// body, after decompression, is all the data of input, the model's only input, for one
// request of batch 1. input is as in the model's metadata; when batched, its first dimension
// is the batch dimension and becomes 1. One other dimension may be -1 and is deduced from the
// body's size. A BYTES input must have exactly one element, which is the whole body (Triton's
// rule). The returned request asks for every output as binary, as Triton answers raw requests.
// The tensor's Data aliases body for fixed-size datatypes.
func DecodeRawRequest(body []byte, contentEncoding string, maxBody int, input MetadataTensor, batched bool) (*InferRequest, []Tensor, error) {
	size := DatatypeSize(input.Datatype)
	if size < 0 {
		// The model's metadata is the server's, so this is not the client's fault.
		return nil, nil, errors.New("oip: raw request: model input " + input.Name + " has unknown datatype " + input.Datatype)
	}
	body, err := Decompress(body, contentEncoding, maxBody)
	if err != nil {
		return nil, nil, err
	}
	shape := append([]int64(nil), input.Shape...)
	if batched {
		if len(shape) == 0 {
			return nil, nil, errors.New("oip: raw request: batched model input " + input.Name + " has no batch dimension")
		}
		shape[0] = 1
	}
	variable, known := -1, int64(1)
	for i, d := range shape {
		switch {
		case d == -1 && variable >= 0:
			return nil, nil, errorf(ErrBadRequest, "raw request: the shape %v of input %q has more than one variable dimension, so it cannot be deduced from the body; send a JSON header", input.Shape, input.Name)
		case d == -1:
			variable = i
		case d < 0:
			return nil, nil, errorf(ErrBadRequest, "raw request: input %q has shape %v", input.Name, input.Shape)
		case d == 0:
			known = 0
		case known > maxInt/d:
			return nil, nil, errorf(ErrBadRequest, "raw request: shape %v of input %q has too many elements", input.Shape, input.Name)
		default:
			known *= d
		}
	}
	var data []byte
	if size == 0 {
		if variable >= 0 || known != 1 {
			return nil, nil, errorf(ErrBadRequest, "raw request: a BYTES input must have shape [1], but %q has shape %v", input.Name, shape)
		}
		if int64(len(body)) > math.MaxUint32 {
			return nil, nil, errorf(ErrBadRequest, "raw request: a BYTES element is limited to 4 GiB")
		}
		data = make([]byte, 4+len(body))
		binary.LittleEndian.PutUint32(data, uint32(len(body)))
		copy(data[4:], body)
	} else {
		row := known * int64(size)
		switch {
		case variable >= 0 && row == 0:
			return nil, nil, errorf(ErrBadRequest, "raw request: the shape %v of input %q has a zero dimension, so its variable dimension cannot be deduced", input.Shape, input.Name)
		case variable >= 0 && int64(len(body))%row != 0:
			return nil, nil, errorf(ErrBadRequest, "raw request: %d bytes is not a whole number of %v %s elements for input %q", len(body), shape, input.Datatype, input.Name)
		case variable >= 0:
			shape[variable] = int64(len(body)) / row
		case int64(len(body)) != row:
			return nil, nil, errorf(ErrBadRequest, "raw request: input %q of shape %v %s needs %d bytes, got %d", input.Name, shape, input.Datatype, row, len(body))
		}
		if input.Datatype == "BOOL" {
			if err := checkBools(body); err != nil {
				return nil, nil, errorf(ErrBadRequest, "raw request: input %q: %v", input.Name, err)
			}
		}
		data = body
	}
	req := &InferRequest{
		Parameters: Parameters{ParamBinaryDataOutput: true},
		Inputs: []RequestInput{{
			Name: input.Name, Shape: shape, Datatype: input.Datatype,
			Parameters: Parameters{ParamBinaryDataSize: float64(len(data))}, // float64, as JSON decodes it
		}},
	}
	return req, []Tensor{{Name: input.Name, Datatype: input.Datatype, Shape: shape, Data: data}}, nil
}

// DecodeResponse parses an infer response body, already decompressed. headerLen is the
// response's Inference-Header-Content-Length, or -1 when it had none. It returns the response
// (outputs with Data nil) and one Tensor per output, in output order. Errors about the body
// wrap ErrBadResponse. Binary tensors alias body.
func DecodeResponse(body []byte, headerLen int) (*InferResponse, []Tensor, error) {
	if headerLen == 0 {
		return nil, nil, errorf(ErrBadResponse, "response %s is 0", HeaderContentLength)
	}
	header, rest, err := splitBody(body, headerLen, ErrBadResponse)
	if err != nil {
		return nil, nil, err
	}
	var w struct {
		ModelName    string       `json:"model_name"`
		ModelVersion string       `json:"model_version"`
		ID           string       `json:"id"`
		Parameters   Parameters   `json:"parameters"`
		Outputs      []wireTensor `json:"outputs"`
	}
	if err := json.Unmarshal(header, &w); err != nil {
		return nil, nil, errorf(ErrBadResponse, "invalid JSON in response header: %s", jsonProblem(err))
	}
	ts, err := decodeTensors("output", w.Outputs, rest, ErrBadResponse, false)
	if err != nil {
		return nil, nil, err
	}
	resp := &InferResponse{ModelName: w.ModelName, ModelVersion: w.ModelVersion, ID: w.ID, Parameters: w.Parameters,
		Outputs: make([]ResponseOutput, len(w.Outputs))}
	for i, o := range w.Outputs {
		resp.Outputs[i] = ResponseOutput{Name: o.Name, Shape: o.Shape, Datatype: o.Datatype, Parameters: o.Parameters}
	}
	return resp, ts, nil
}

// jsonProblem says what is wrong with a header in the protocol's terms: a type mismatch names
// the field and the JSON kinds, not the Go types it was decoding into.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return err.Error()
	}
	// Value is a JSON kind ("array"), or "number 1.5" for a number that does not fit.
	got := article(te.Value) + " " + te.Value
	if n, ok := strings.CutPrefix(te.Value, "number "); ok {
		got = n
	}
	if te.Field == "" {
		return fmt.Sprintf("the header must be %s, got %s", jsonKind(te.Type), got)
	}
	return fmt.Sprintf("field %q must be %s, got %s", te.Field, jsonKind(te.Type), got)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer (%v)", t)
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a JSON value"
}

func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an"
	}
	return "a"
}

// wireTensor is an input or output as decoded from JSON. Data stays raw so that numbers are
// converted straight to the datatype, with no float64 detour that would lose INT64 precision.
type wireTensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters Parameters      `json:"parameters"`
	Data       json.RawMessage `json:"data"`
	// parsed is Data converted to the datatype, by fastHeader; nil if not yet.
	parsed []byte
}

// splitBody splits a decompressed body into its JSON header and the binary data after it.
func splitBody(body []byte, headerLen int, kind error) (header, rest []byte, err error) {
	switch {
	case headerLen == -1:
		return body, nil, nil
	case headerLen < 0:
		return nil, nil, errorf(kind, "%s is negative (%d)", HeaderContentLength, headerLen)
	case headerLen > len(body):
		return nil, nil, errorf(kind, "%s is %d but the body has only %d bytes", HeaderContentLength, headerLen, len(body))
	}
	return body[:headerLen], body[headerLen:], nil
}

// decodeTensors turns the JSON tensors into Tensors, taking binary ones from bin in order;
// what ("input" or "output") names them in messages. strict: the data arrays have not been
// validated as JSON (see parseData).
func decodeTensors(what string, ws []wireTensor, bin []byte, kind error, strict bool) ([]Tensor, error) {
	ts := make([]Tensor, len(ws))
	seen := make(map[string]bool, len(ws))
	off := 0
	for i, w := range ws {
		size, n, err := tensorHeader(what, i, w.Name, w.Datatype, w.Shape, seen, kind)
		if err != nil {
			return nil, err
		}
		if w.Shape == nil {
			return nil, errorf(kind, "%s %q has no shape", what, w.Name)
		}
		hasData := len(w.Data) > 0 && !bytes.Equal(w.Data, []byte("null"))
		var data []byte
		if bds, ok := w.Parameters[ParamBinaryDataSize]; ok {
			if hasData {
				return nil, errorf(kind, "%s %q has both JSON data and %s", what, w.Name, ParamBinaryDataSize)
			}
			f, isNum := bds.(float64)
			if !isNum || f < 0 || f != math.Trunc(f) {
				return nil, errorf(kind, "%s %q: %s must be a non-negative integer, got %v", what, w.Name, ParamBinaryDataSize, bds)
			}
			if f > float64(len(bin)-off) {
				return nil, errorf(kind, "%s %q: %s is %.0f but only %d bytes of binary data remain after the JSON header", what, w.Name, ParamBinaryDataSize, f, len(bin)-off)
			}
			bds := int(f)
			data = bin[off : off+bds : off+bds]
			off += bds
			if size > 0 {
				if int64(bds) != n*int64(size) {
					return nil, errorf(kind, "%s %q: shape %v of %s needs %d bytes, but %s is %d", what, w.Name, w.Shape, w.Datatype, n*int64(size), ParamBinaryDataSize, bds)
				}
				if w.Datatype == "BOOL" {
					if err := checkBools(data); err != nil {
						return nil, errorf(kind, "%s %q: %v", what, w.Name, err)
					}
				}
			} else if err := checkBytesElements(data, n); err != nil {
				return nil, errorf(kind, "%s %q: BYTES data: %v", what, w.Name, err)
			}
		} else {
			if !hasData {
				return nil, errorf(kind, "%s %q has neither data nor %s", what, w.Name, ParamBinaryDataSize)
			}
			if !jsonable(w.Datatype) {
				return nil, errorf(kind, "%s %q: %s cannot be JSON data; send it as binary data (%s)", what, w.Name, w.Datatype, ParamBinaryDataSize)
			}
			data = w.parsed
			if data == nil {
				data, err = parseData(w.Data, w.Shape, n, w.Datatype, strict)
			}
			if err != nil {
				return nil, errorf(kind, "%s %q: %v", what, w.Name, err)
			}
		}
		ts[i] = Tensor{Name: w.Name, Datatype: w.Datatype, Shape: w.Shape, Data: data}
	}
	if off != len(bin) {
		return nil, errorf(kind, "%d trailing bytes after the binary data of the %ss", len(bin)-off, what)
	}
	return ts, nil
}

// tensorHeader checks a tensor's name (present, not seen before), datatype and shape, and
// returns its element size (0 for BYTES) and element count.
func tensorHeader(what string, i int, name, datatype string, shape []int64, seen map[string]bool, kind error) (size int, n int64, err error) {
	if name == "" {
		return 0, 0, errorf(kind, "%s %d has no name", what, i)
	}
	if seen[name] {
		return 0, 0, errorf(kind, "duplicate %s name %q", what, name)
	}
	seen[name] = true
	if datatype == "" {
		return 0, 0, errorf(kind, "%s %q has no datatype", what, name)
	}
	size = DatatypeSize(datatype)
	if size < 0 {
		return 0, 0, errorf(kind, "%s %q has unknown datatype %q", what, name, datatype)
	}
	n, err = ElementCount(shape)
	if err != nil {
		return 0, 0, errorf(kind, "%s %q: %v", what, name, err)
	}
	if size > 0 && n > maxInt/int64(size) {
		return 0, 0, errorf(kind, "%s %q: shape %v is too large", what, name, shape)
	}
	return size, n, nil
}

// checkBools rejects BOOL bytes other than 0 and 1, which LibTorch's bool tensors do not define.
func checkBools(data []byte) error {
	for i, b := range data {
		if b > 1 {
			return fmt.Errorf("BOOL element %d is %d; it must be 0 or 1", i, b)
		}
	}
	return nil
}

// checkBytesElements checks that data is exactly n length-prefixed BYTES elements.
func checkBytesElements(data []byte, n int64) error {
	if n > int64(len(data))/4 {
		return fmt.Errorf("%d bytes cannot hold %d elements", len(data), n)
	}
	off := 0
	for i := int64(0); i < n; i++ {
		if len(data)-off < 4 {
			return fmt.Errorf("element %d: length prefix runs past the data", i)
		}
		l := binary.LittleEndian.Uint32(data[off:])
		off += 4
		if uint64(l) > uint64(len(data)-off) {
			return fmt.Errorf("element %d: length %d runs past the data", i, l)
		}
		off += int(l)
	}
	if off != len(data) {
		return fmt.Errorf("%d bytes left after %d elements", len(data)-off, n)
	}
	return nil
}

// Decompress undoes contentEncoding (gzip, deflate or none), refusing to produce more than
// maxBody bytes so that a small compressed body cannot expand without bound
// (ErrBodyTooLarge). The TorchServe API's plain bodies are decoded with it too.
func Decompress(body []byte, contentEncoding string, maxBody int) ([]byte, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	var r io.Reader
	hint := 0
	switch enc := strings.ToLower(strings.TrimSpace(contentEncoding)); enc {
	case "", "identity":
		if len(body) > maxBody {
			return nil, errorf(ErrBodyTooLarge, "body of %d bytes exceeds the limit of %d", len(body), maxBody)
		}
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, errorf(ErrBadRequest, "gzip body: %v", err)
		}
		r = zr
		// A gzip trailer ends with the uncompressed size mod 2^32: a good first allocation.
		if len(body) >= 4 {
			hint = int(binary.LittleEndian.Uint32(body[len(body)-4:]))
		}
	case "deflate":
		// HTTP's "deflate" is zlib-wrapped (RFC 9110); some clients send bare deflate
		// streams, so fall back to those when the zlib header does not check out.
		zr, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			r = flate.NewReader(bytes.NewReader(body))
		} else {
			r = zr
		}
		hint = 4 * len(body)
	default:
		return nil, errorf(ErrBadRequest, "unsupported Content-Encoding %q (gzip, deflate or none)", contentEncoding)
	}
	// Room for the final read that finds EOF, or the buffer doubles just for that.
	hint = min(max(hint, 0)+bytes.MinRead, maxBody+1)
	buf := bytes.NewBuffer(make([]byte, 0, hint))
	n, err := buf.ReadFrom(io.LimitReader(r, int64(maxBody)+1))
	if err != nil {
		return nil, errorf(ErrBadRequest, "%s body: %v", contentEncoding, err)
	}
	if n > int64(maxBody) {
		return nil, errorf(ErrBodyTooLarge, "decompressed body exceeds the limit of %d bytes", maxBody)
	}
	return buf.Bytes(), nil
}
