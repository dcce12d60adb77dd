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
	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/torch"
)

func init() { Register("tensor", newTensorHandler) }

// TensorHandler passes tensors through with no pre- or postprocessing, for models that take
// tensors, such as an MNIST-style CNN fed a 1×28×28 array, or a BERT-style model fed
// input_ids and attention_mask.
//
// In: an .npy body (Content-Type application/x-npy, or the \x93NUMPY magic), or JSON: nested
// lists, or {"data": [...], "shape": [...], "dtype": "float32"}. A model of several declared
// inputs takes a JSON object with one such tensor per input name, or one multipart field per
// input, named after it. One request is one item; a request whose rank equals the declared
// input's may carry several items in its leading dimension. Out: the model's output for this
// request, as .npy when the request was .npy or asks for it (Accept: application/x-npy), else
// JSON {"data", "shape", "dtype"}; an output holding a NaN or an infinity, which JSON numbers
// cannot carry, goes as .npy too. A model of several outputs (a tuple, list or dict) answers
// a JSON object of them by name. JSON values must fit the dtype: 1e300 is no float32, 300 no
// uint8, 2.5 no int64.
//
// Declared inputs with a variable dimension after the batch's (a sequence length, -1) are
// padded with zeros to the batch's longest, so requests of different lengths share a forward;
// see padPlan.
type TensorHandler struct {
	ins  []archive.TensorSpec // the declared inputs, in forward's order; nil: undeclared
	outs []archive.TensorSpec // the declared outputs, which name an answer's tensors
	pad  *padPlan             // nil: no input has a variable dimension past the batch's
}

func newTensorHandler(ctx Context) (Handler, error) {
	h := &TensorHandler{ins: ctx.Config.Inputs, outs: ctx.Config.Outputs}
	h.pad = newPadPlan(h.ins, h.outs)
	return h, nil
}

type tensorState struct{ npy bool }

// Preprocess decodes and validates the request's tensors.
func (h *TensorHandler) Preprocess(r *Request) (*Sample, error) {
	wantNpy := strings.Contains(r.Header("Accept"), "application/x-npy")
	if len(h.ins) > 1 {
		return h.preprocessNamed(r, wantNpy)
	}
	if len(r.Inputs) != 1 {
		return nil, BadInput("tensor handler takes one input per request, got %d", len(r.Inputs))
	}
	var spec *archive.TensorSpec
	if len(h.ins) == 1 {
		spec = &h.ins[0]
	}
	t, isNpy, err := decodeTensor(r.Inputs[0], spec)
	if err != nil {
		return nil, err
	}
	if t, err = h.check(t, spec); err != nil {
		return nil, err
	}
	return &Sample{Items: int(t.Shape[0]), Tensors: []Tensor{t}, State: tensorState{npy: wantNpy || isNpy}}, nil
}

// preprocessNamed reads one tensor per declared input: the keys of a JSON object, or the
// request's multipart fields by name.
func (h *TensorHandler) preprocessNamed(r *Request, wantNpy bool) (*Sample, error) {
	names := make([]string, len(h.ins))
	for i, in := range h.ins {
		names[i] = in.Name
	}
	byName := map[string]Payload{}
	if len(r.Inputs) == 1 && !isNpy(r.Inputs[0]) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(r.Inputs[0].Data, &obj); err != nil || obj == nil {
			return nil, BadInput("the model takes %d inputs (%s): send a JSON object with one tensor per input name, or one multipart field per input",
				len(h.ins), strings.Join(names, ", "))
		}
		for k, v := range obj {
			byName[k] = Payload{Name: k, ContentType: "application/json", Data: v}
		}
	} else {
		for _, p := range r.Inputs {
			byName[p.Name] = p
		}
	}
	for k := range byName {
		if !slices.Contains(names, k) {
			return nil, BadInput("unknown input %q: the model takes %s", k, strings.Join(names, ", "))
		}
	}
	s := &Sample{State: tensorState{npy: wantNpy}}
	for i := range h.ins {
		spec := &h.ins[i]
		p, ok := byName[spec.Name]
		if !ok {
			return nil, BadInput("missing input %q: the model takes %s", spec.Name, strings.Join(names, ", "))
		}
		t, _, err := decodeTensor(p, spec)
		if err != nil {
			return nil, BadInput("input %q: %v", spec.Name, err)
		}
		if t, err = h.check(t, spec); err != nil {
			return nil, err
		}
		if i == 0 {
			s.Items = int(t.Shape[0])
		} else if int(t.Shape[0]) != s.Items {
			return nil, BadInput("inputs disagree on the batch size: %q has %d items, %q has %d", h.ins[0].Name, s.Items, spec.Name, t.Shape[0])
		}
		s.Tensors = append(s.Tensors, t)
	}
	return s, nil
}

func isNpy(p Payload) bool {
	return bytes.HasPrefix(p.Data, []byte("\x93NUMPY")) || strings.HasPrefix(p.ContentType, "application/x-npy")
}

// decodeTensor reads one payload as .npy or JSON; JSON lists take spec's dtype when it
// travels as JSON numbers, else float32. It reports whether the payload was .npy.
func decodeTensor(p Payload, spec *archive.TensorSpec) (Tensor, bool, error) {
	if len(p.Data) == 0 {
		return Tensor{}, false, BadInput("empty body: send an .npy array or a JSON tensor")
	}
	if isNpy(p) {
		a, err := npy.Decode(p.Data)
		if err != nil {
			return Tensor{}, true, BadInput("%v", err)
		}
		dt, err := torch.ParseDType(a.DType)
		if err != nil {
			return Tensor{}, true, BadInput("%v", err)
		}
		return Tensor{DType: dt, Shape: a.Shape, Data: a.Data}, true, nil
	}
	dt := torch.Float32
	if spec != nil {
		if d, err := torch.ParseDType(spec.DType); err == nil && d != torch.Float16 && d != torch.BFloat16 && d.Size() > 0 {
			dt = d
		}
	}
	t, err := decodeJSONTensorAs(p.Data, dt)
	return t, false, err
}

// PreprocessTensor takes a tensor as Preprocess takes a decoded JSON one.
func (h *TensorHandler) PreprocessTensor(t Tensor) (*Sample, error) {
	if len(h.ins) > 1 {
		names := make([]string, len(h.ins))
		for i, in := range h.ins {
			names[i] = in.Name
		}
		return nil, BadInput("the model takes %d inputs: send each as an input named %s", len(h.ins), strings.Join(names, ", "))
	}
	var spec *archive.TensorSpec
	if len(h.ins) == 1 {
		spec = &h.ins[0]
	}
	t, err := h.check(t, spec)
	if err != nil {
		return nil, err
	}
	return &Sample{Items: int(t.Shape[0]), Tensors: []Tensor{t}, State: tensorState{}}, nil
}

// check validates t against its declared input spec (nil: undeclared) and gives it a leading
// item dimension.
func (h *TensorHandler) check(t Tensor, spec *archive.TensorSpec) (Tensor, error) {
	if spec == nil {
		if len(t.Shape) == 0 {
			return t, BadInput("a scalar cannot be batched; send at least one dimension")
		}
		return t, nil
	}
	want := spec.Shape
	if dt, _ := torch.ParseDType(spec.DType); spec.DType != "" && dt != t.DType {
		return t, BadInput("input %q must be %s, got %v", spec.Name, spec.DType, t.DType)
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
			return t, BadInput("input %q must have shape %v (-1: any), got %v", spec.Name, want, t.Shape)
		}
	}
	if len(t.Shape) == 0 || t.Shape[0] < 1 {
		return t, BadInput("input %q has no items (leading dimension 0)", spec.Name)
	}
	return t, nil
}

// outputName is the name of a model's output i: the dict key the model gave it, else the
// declared output's name, else output__i.
func (h *TensorHandler) outputName(out []Tensor, i int) string {
	switch {
	case out[i].Name != "":
		return out[i].Name
	case i < len(h.outs):
		return h.outs[i].Name
	}
	return "output__" + strconv.Itoa(i)
}

// Postprocess returns the request's rows of the model's output; several outputs answer a
// JSON object of them by name.
func (h *TensorHandler) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) == 0 {
		return nil, fmt.Errorf("tensor handler: the model returned no tensor")
	}
	st, _ := s.State.(tensorState)
	if len(out) > 1 {
		if st.npy {
			return nil, BadInput("the model has %d outputs and an .npy answer holds one: ask for JSON, or use the v2 API (/v2/models/<name>/infer)", len(out))
		}
		var b bytes.Buffer
		b.WriteByte('{')
		for i, o := range out {
			if i > 0 {
				b.WriteString(", ")
			}
			name, _ := json.Marshal(h.outputName(out, i))
			b.Write(name)
			b.WriteString(": ")
			enc, err := encodeJSONTensor(o)
			if errors.Is(err, errNotJSON) {
				return nil, BadInput("output %s holds a NaN or an infinity, which JSON cannot carry: use the v2 API, which answers it as binary data", name)
			}
			if err != nil {
				return nil, err
			}
			b.Write(bytes.TrimSpace(enc))
		}
		b.WriteString("}\n")
		return &Response{ContentType: "application/json", Body: b.Bytes()}, nil
	}
	o := out[0]
	if st.npy {
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
			b.Write(jsonfloat.AppendFloat32(b.AvailableBuffer(), float32(f)))
		case torch.Float64:
			f := math.Float64frombits(binary.LittleEndian.Uint64(e))
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, errNotJSON
			}
			b.Write(jsonfloat.AppendFloat64(b.AvailableBuffer(), f))
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
