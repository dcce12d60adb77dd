package tritonpy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/torch"
)

// The wire format between Run and the adapter (python/torchd_triton_adapter.py), one
// message per request each way: a uint32 little-endian header length, a JSON header, then
// the data region its tensors point into (offset and size, 8-byte aligned). A reply's header
// holds its outputs, or an error and Triton's error code. Tensors of strings are in Triton's
// BYTES layout, as torch.Bytes holds them.

type wireTensor struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Offset   int     `json:"offset"`
	Size     int     `json:"size"`
}

type requestHeader struct {
	ID         string         `json:"id"`
	Parameters map[string]any `json:"parameters"`
	Outputs    []string       `json:"outputs"`
	Inputs     []wireTensor   `json:"inputs"`
}

type replyHeader struct {
	Outputs []wireTensor `json:"outputs"`
	Error   *string      `json:"error"`
	Code    string       `json:"code"`
}

// datatypes are Triton's names of torchd's tensor types.
var datatypes = map[torch.DType]string{
	torch.Bool: "BOOL", torch.Uint8: "UINT8", torch.Int8: "INT8", torch.Int16: "INT16", torch.Int32: "INT32",
	torch.Int64: "INT64", torch.Float16: "FP16", torch.Float32: "FP32", torch.Float64: "FP64", torch.Bytes: "BYTES",
}

func dtypeOf(datatype string) (torch.DType, bool) {
	for d, n := range datatypes {
		if n == datatype {
			return d, true
		}
	}
	return 0, false
}

// encodeRequest lays out one request: its tensors under the given input names, and the
// outputs it asks for.
func encodeRequest(id string, names []string, ts []handlers.Tensor, outputs []string) ([]byte, error) {
	if len(ts) != len(names) {
		return nil, fmt.Errorf("the model takes %d inputs, got %d", len(names), len(ts))
	}
	h := requestHeader{ID: id, Parameters: map[string]any{}, Outputs: outputs, Inputs: make([]wireTensor, len(ts))}
	size := 0
	for i, t := range ts {
		dt, ok := datatypes[t.DType]
		if !ok {
			return nil, fmt.Errorf("input %q: type %s is not one torchd passes to model.py", names[i], t.DType)
		}
		size += -size & 7
		h.Inputs[i] = wireTensor{Name: names[i], Datatype: dt, Shape: t.Shape, Offset: size, Size: len(t.Data)}
		size += len(t.Data)
	}
	return frame(h, size, func(region []byte) {
		for i, t := range ts {
			copy(region[h.Inputs[i].Offset:], t.Data)
		}
	})
}

// encodeReply is the adapter's side of a reply, for tests.
func encodeReply(ts []handlers.Tensor) ([]byte, error) {
	h := replyHeader{Outputs: make([]wireTensor, len(ts))}
	size := 0
	for i, t := range ts {
		size += -size & 7
		h.Outputs[i] = wireTensor{Name: t.Name, Datatype: datatypes[t.DType], Shape: t.Shape, Offset: size, Size: len(t.Data)}
		size += len(t.Data)
	}
	return frame(h, size, func(region []byte) {
		for i, t := range ts {
			copy(region[h.Outputs[i].Offset:], t.Data)
		}
	})
}

func frame(h any, size int, fill func(region []byte)) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4+len(hb)+size)
	binary.LittleEndian.PutUint32(b, uint32(len(hb)))
	copy(b[4:], hb)
	fill(b[4+len(hb):])
	return b, nil
}

// replyError is a request's error as model.py answered it, with Triton's code.
type replyError struct {
	Msg, Code string
}

func (e *replyError) Error() string { return e.Msg }

var errShortReply = errors.New("the reply is shorter than its header says")

// decodeReply reads one reply: its tensors, each checked against its type and shape and
// copied out of the message, or the model's error for the request.
func decodeReply(b []byte) ([]handlers.Tensor, error) {
	if len(b) < 4 {
		return nil, errShortReply
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, errShortReply
	}
	var h replyHeader
	if err := json.Unmarshal(b[4:4+n], &h); err != nil {
		return nil, fmt.Errorf("the reply's header is not JSON: %v", err)
	}
	if h.Error != nil {
		return nil, &replyError{Msg: *h.Error, Code: h.Code}
	}
	region := b[4+n:]
	out := make([]handlers.Tensor, len(h.Outputs))
	for i, w := range h.Outputs {
		dt, ok := dtypeOf(w.Datatype)
		if !ok {
			return nil, fmt.Errorf("output %q: datatype %q is not one torchd serves", w.Name, w.Datatype)
		}
		if w.Offset < 0 || w.Size < 0 || w.Offset > len(region) || w.Size > len(region)-w.Offset {
			return nil, fmt.Errorf("output %q runs past the reply", w.Name)
		}
		numel := int64(1)
		for _, d := range w.Shape {
			if d < 0 || d > 1<<40 || numel*max(d, 1) > 1<<40 {
				return nil, fmt.Errorf("output %q: shape %v is not a tensor's", w.Name, w.Shape)
			}
			numel *= d
		}
		data := region[w.Offset : w.Offset+w.Size]
		if dt == torch.Bytes {
			count, err := bytestr.Count(data)
			if err != nil {
				return nil, fmt.Errorf("output %q: %v", w.Name, err)
			}
			if count != numel {
				return nil, fmt.Errorf("output %q holds %d strings, its shape %v %d", w.Name, count, w.Shape, numel)
			}
		} else if int64(len(data)) != numel*int64(dt.Size()) {
			return nil, fmt.Errorf("output %q holds %d bytes, its shape %v of %s needs %d", w.Name, len(data), w.Shape, w.Datatype, numel*int64(dt.Size()))
		}
		// Copied: an aligned slice of its own, not a view into the whole reply.
		out[i] = handlers.Tensor{Name: w.Name, DType: dt, Shape: append([]int64{}, w.Shape...), Data: append([]byte(nil), data...)}
	}
	return out, nil
}
