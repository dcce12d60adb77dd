package handlers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/torch"
)

func init() { Register("tensor", newTensorHandler) }

// TensorHandler passes tensors through with no pre- or postprocessing, for models that take
// tensors, such as an MNIST-style CNN fed a 1×28×28 array.
//
// In: an .npy body (Content-Type application/x-npy, or the \x93NUMPY magic), or JSON: nested
// lists, or {"data": [...], "shape": [...], "dtype": "float32"}. One request is one item; a
// request whose rank equals the declared input's may carry several items in its leading
// dimension. Out: the model's first output for this request, as .npy when the request was
// .npy or asks for it (Accept: application/x-npy), else JSON {"data", "shape", "dtype"}; an
// output holding a NaN or an infinity, which JSON numbers cannot carry, goes as .npy too.
// JSON values must fit the dtype: 1e300 is no float32, 300 no uint8, 2.5 no int64.
type TensorHandler struct {
	spec *archive.TensorSpec // the declared input, when the archive declares one
}

func newTensorHandler(ctx Context) (Handler, error) {
	h := &TensorHandler{}
	if len(ctx.Config.Inputs) > 1 {
		return nil, fmt.Errorf("tensor handler: the model declares %d inputs; it takes one", len(ctx.Config.Inputs))
	}
	if len(ctx.Config.Inputs) == 1 {
		h.spec = &ctx.Config.Inputs[0]
	}
	return h, nil
}

type tensorState struct{ npy bool }

// maxJSONElements bounds a JSON tensor; a larger one should be sent as .npy.
const maxJSONElements = 1 << 24

// Preprocess decodes and validates the request's tensor.
func (h *TensorHandler) Preprocess(r *Request) (*Sample, error) {
	if len(r.Inputs) != 1 {
		return nil, BadInput("tensor handler takes one input per request, got %d", len(r.Inputs))
	}
	p := r.Inputs[0]
	if len(p.Data) == 0 {
		return nil, BadInput("empty body: send an .npy array or a JSON tensor")
	}
	wantNpy := strings.Contains(r.Header("Accept"), "application/x-npy")
	var t Tensor
	if bytes.HasPrefix(p.Data, []byte("\x93NUMPY")) || strings.HasPrefix(p.ContentType, "application/x-npy") {
		a, err := npy.Decode(p.Data)
		if err != nil {
			return nil, BadInput("%v", err)
		}
		dt, err := torch.ParseDType(a.DType)
		if err != nil {
			return nil, BadInput("%v", err)
		}
		t = Tensor{DType: dt, Shape: a.Shape, Data: a.Data}
		wantNpy = true
	} else {
		var err error
		if t, err = decodeJSONTensor(p.Data); err != nil {
			return nil, err
		}
	}
	t, err := h.check(t)
	if err != nil {
		return nil, err
	}
	return &Sample{Items: int(t.Shape[0]), Tensors: []Tensor{t}, State: tensorState{npy: wantNpy}}, nil
}

// check validates t against the declared input and gives it a leading item dimension.
func (h *TensorHandler) check(t Tensor) (Tensor, error) {
	if h.spec == nil {
		if len(t.Shape) == 0 {
			return t, BadInput("a scalar cannot be batched; send at least one dimension")
		}
		return t, nil
	}
	want := h.spec.Shape
	if dt, _ := torch.ParseDType(h.spec.DType); h.spec.DType != "" && dt != t.DType {
		return t, BadInput("input %q must be %s, got %v", h.spec.Name, h.spec.DType, t.DType)
	}
	if len(want) > 0 && len(t.Shape) == len(want)-1 {
		t.Shape = append([]int64{1}, t.Shape...)
	}
	if len(want) > 0 {
		ok := len(t.Shape) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = want[i] < 0 || want[i] == t.Shape[i]
		}
		if !ok {
			return t, BadInput("input %q must have shape %v (-1: any), got %v", h.spec.Name, want, t.Shape)
		}
	}
	if t.Shape[0] < 1 {
		return t, BadInput("input %q has no items (leading dimension 0)", h.spec.Name)
	}
	return t, nil
}

// Postprocess returns the request's rows of the model's first output.
func (h *TensorHandler) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) == 0 {
		return nil, fmt.Errorf("tensor handler: the model returned no tensor")
	}
	o := out[0]
	if st, _ := s.State.(tensorState); st.npy {
		b, err := npy.Encode(npy.Array{DType: o.DType.String(), Shape: o.Shape, Data: o.Data})
		if err != nil {
			return nil, err
		}
		return &Response{ContentType: "application/x-npy", Body: b}, nil
	}
	b, err := encodeJSONTensor(o)
	if errors.Is(err, errNotJSON) {
		// NaN and infinities have no JSON number: answer .npy, as the Open Inference
		// Protocol answers such outputs binary, rather than JSON no parser reads.
		b, err = npy.Encode(npy.Array{DType: o.DType.String(), Shape: o.Shape, Data: o.Data})
		if err != nil {
			return nil, err
		}
		return &Response{ContentType: "application/x-npy", Body: b}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Response{ContentType: "application/json", Body: b}, nil
}

// errNotJSON is encodeJSONTensor's answer to a NaN or an infinity.
var errNotJSON = errors.New("tensor handler: the output holds a NaN or an infinity, which JSON cannot carry")

// decodeJSONTensor reads nested lists, or {"data", "shape", "dtype"} with flat or nested data.
func decodeJSONTensor(b []byte) (Tensor, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Tensor{}, BadInput("invalid JSON: %v", err)
	}
	dtype := torch.Float32
	var shape []int64
	if obj, ok := v.(map[string]any); ok {
		data, ok := obj["data"]
		if !ok {
			return Tensor{}, BadInput(`a JSON tensor object needs "data" (and optionally "shape", "dtype")`)
		}
		if s, ok := obj["dtype"].(string); ok {
			dt, err := torch.ParseDType(s)
			if err != nil {
				return Tensor{}, BadInput("%v", err)
			}
			if dt == torch.Float16 || dt == torch.BFloat16 {
				return Tensor{}, BadInput("dtype %s cannot travel as JSON numbers; send .npy", s)
			}
			dtype = dt
		}
		if raw, ok := obj["shape"]; ok {
			list, ok := raw.([]any)
			if !ok {
				return Tensor{}, BadInput(`"shape" must be a list of integers`)
			}
			for _, e := range list {
				n, err := strconv.ParseInt(fmt.Sprint(e), 10, 64)
				if err != nil || n < 0 {
					return Tensor{}, BadInput(`"shape" must be a list of non-negative integers, got %v`, e)
				}
				shape = append(shape, n)
			}
		}
		v = data
	}
	var flat []any
	nested, err := flatten(v, 0, &flat)
	if err != nil {
		return Tensor{}, err
	}
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
		if n != int64(len(flat)) {
			return Tensor{}, BadInput("shape %v needs %d values, data has %d", shape, n, len(flat))
		}
	}
	size := dtype.Size()
	data := make([]byte, size*len(flat))
	for i, e := range flat {
		if err := putJSONElem(data[i*size:], dtype, e); err != nil {
			return Tensor{}, BadInput("data[%d]: %v", i, err)
		}
	}
	return Tensor{DType: dtype, Shape: shape, Data: data}, nil
}

// flatten appends v's leaves in row-major order and returns its nested shape; ragged lists
// are errors.
func flatten(v any, depth int, out *[]any) ([]int64, error) {
	if depth > 32 {
		return nil, BadInput("JSON tensor nested deeper than 32 levels")
	}
	list, ok := v.([]any)
	if !ok {
		if len(*out) >= maxJSONElements {
			return nil, BadInput("JSON tensor has more than %d values; send .npy", maxJSONElements)
		}
		*out = append(*out, v)
		return []int64{}, nil
	}
	var inner []int64
	for i, e := range list {
		s, err := flatten(e, depth+1, out)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			inner = s
		} else if !slices.Equal(s, inner) {
			return nil, BadInput("ragged JSON tensor: item %d has shape %v, item 0 has %v", i, s, inner)
		}
	}
	return append([]int64{int64(len(list))}, inner...), nil
}

// intRanges are the values each integer dtype (and bool) holds.
var intRanges = map[torch.DType][2]int64{
	torch.Int64: {math.MinInt64, math.MaxInt64}, torch.Int32: {math.MinInt32, math.MaxInt32},
	torch.Int8: {math.MinInt8, math.MaxInt8}, torch.Uint8: {0, math.MaxUint8}, torch.Bool: {0, 1},
}

// putJSONElem stores one JSON value as dt. A value dt cannot hold is refused rather than
// wrapped or rounded to infinity: 1e300 as float32 would reach the model as +Inf, and 300 as
// uint8 as 44.
func putJSONElem(b []byte, dt torch.DType, e any) error {
	var s string
	switch x := e.(type) {
	case json.Number:
		s = string(x)
	case bool:
		s = "0"
		if x {
			s = "1"
		}
	default:
		return fmt.Errorf("want a number, got %s", jsonKind(e))
	}
	switch dt {
	case torch.Float32, torch.Float64:
		bits := 64
		if dt == torch.Float32 {
			bits = 32
		}
		f, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return fmt.Errorf("%.30s is out of range for %v", s, dt)
		}
		if dt == torch.Float32 {
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f)))
		} else {
			binary.LittleEndian.PutUint64(b, math.Float64bits(f))
		}
		return nil
	}
	r, ok := intRanges[dt]
	if !ok {
		return fmt.Errorf("dtype %v cannot be sent as JSON; send .npy", dt)
	}
	lo, hi := r[0], r[1]
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// 2.0 and 1e3 are whole numbers too; 2.5 is not.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
			return fmt.Errorf("%.30s is not %v (an integer in [%d, %d])", s, dt, lo, hi)
		}
		v = int64(f)
	}
	if v < lo || v > hi {
		return fmt.Errorf("%.30s is out of range for %v [%d, %d]", s, dt, lo, hi)
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

// jsonKind names a decoded JSON value's kind for messages.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func encodeJSONTensor(t Tensor) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"dtype": "`)
	b.WriteString(t.DType.String())
	b.WriteString(`", "shape": `)
	shape, _ := json.Marshal(t.Shape)
	b.Write(shape)
	b.WriteString(`, "data": [`)
	size := t.DType.Size()
	if size == 0 {
		return nil, fmt.Errorf("unsupported output dtype %v", t.DType)
	}
	for i := 0; i+size <= len(t.Data); i += size {
		if i > 0 {
			b.WriteString(", ")
		}
		e := t.Data[i:]
		switch t.DType {
		case torch.Float32:
			f := float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, errNotJSON
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 32))
		case torch.Float64:
			f := math.Float64frombits(binary.LittleEndian.Uint64(e))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, errNotJSON
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		case torch.Int64:
			b.WriteString(strconv.FormatInt(int64(binary.LittleEndian.Uint64(e)), 10))
		case torch.Int32:
			b.WriteString(strconv.FormatInt(int64(int32(binary.LittleEndian.Uint32(e))), 10))
		case torch.Uint8:
			b.WriteString(strconv.Itoa(int(e[0])))
		case torch.Int8:
			b.WriteString(strconv.Itoa(int(int8(e[0]))))
		case torch.Bool:
			b.WriteString(strconv.FormatBool(e[0] != 0))
		default:
			return nil, fmt.Errorf("output dtype %v cannot be written as JSON; ask for .npy", t.DType)
		}
	}
	b.WriteString("]}\n")
	return b.Bytes(), nil
}
