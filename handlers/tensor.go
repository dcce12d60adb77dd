package handlers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/jsonfloat"
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

// PreprocessTensor takes a tensor as Preprocess takes a decoded JSON one.
func (h *TensorHandler) PreprocessTensor(t Tensor) (*Sample, error) {
	t, err := h.check(t)
	if err != nil {
		return nil, err
	}
	return &Sample{Items: int(t.Shape[0]), Tensors: []Tensor{t}, State: tensorState{}}, nil
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
