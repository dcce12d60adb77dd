package handlers

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"unsafe"

	"github.com/torchd/torchd/torch"
)

// Infer runs one batch through h's own Inferer, or the default: concatenate the samples
// along their leading dimension, run forward once, and split every output back. An
// AOTInductor package runs only the batch sizes it was exported for, so a batch of more rows
// than its maximum (samples may hold several rows each) runs in consecutive parts. The
// concatenation goes into a stage lent for the call; a worker passes its own to InferStaged.
func Infer(h Handler, m torch.Model, batch []*Sample) ([][]Tensor, error) {
	return InferStaged(h, m, batch, nil)
}

// InferStaged is Infer stacking the batch into st, the worker's own stage (nil: one lent
// for the call).
func InferStaged(h Handler, m torch.Model, batch []*Sample, st *Stage) ([][]Tensor, error) {
	out, err := inferStagedParts(h, m, batch, st)
	if ex, ok := h.(forwardExplainer); ok && err != nil {
		err = ex.explainForward(err)
	}
	return out, err
}

// forwardExplainer is a handler that can say which of its options a failed forward points
// to, in place of LibTorch's traceback.
type forwardExplainer interface{ explainForward(err error) error }

// hintError is a short message for a long error, which it still wraps.
type hintError struct {
	msg string
	err error
}

func (e *hintError) Error() string { return e.msg }
func (e *hintError) Unwrap() error { return e.err }

func inferStagedParts(h Handler, m torch.Model, batch []*Sample, st *Stage) ([][]Tensor, error) {
	if p, ok := m.(*torch.Package); ok && len(batch) > 1 {
		_, hi := p.BatchRange()
		if parts := SplitRows(batch, hi); len(parts) > 1 {
			outs := make([][]Tensor, 0, len(batch))
			for _, part := range parts {
				o, err := inferOnce(h, m, part, st)
				if err != nil {
					return nil, err
				}
				outs = append(outs, o...)
			}
			return outs, nil
		}
	}
	return inferOnce(h, m, batch, st)
}

// SplitRows cuts batch into runs of consecutive samples of at most max rows each; a sample
// of more rows than max is a run of its own (a package refuses one over its maximum with a
// clear error).
func SplitRows(batch []*Sample, max int64) [][]*Sample {
	var parts [][]*Sample
	start, rows := 0, int64(0)
	for i, s := range batch {
		if i > start && rows+int64(s.Items) > max {
			parts = append(parts, batch[start:i])
			start, rows = i, 0
		}
		rows += int64(s.Items)
	}
	return append(parts, batch[start:])
}

func inferOnce(h Handler, m torch.Model, batch []*Sample, st *Stage) ([][]Tensor, error) {
	if inf, ok := h.(Inferer); ok {
		return inf.Infer(m, batch)
	}
	if pd, ok := h.(padder); ok && len(batch) > 1 {
		if p := pd.padding(); p != nil && !sameShapes(batch) {
			return inferPadded(p, m, batch, st)
		}
	}
	if sel, ok := h.(OutputSelector); ok {
		return inferStaged(m, batch, st, func(v any) ([]*torch.Tensor, []string, error) {
			t, err := sel.SelectOutputs(v)
			return t, nil, err
		})
	}
	return DefaultInferStaged(m, batch, st)
}

// batchBuffers recycles the captioner's concatenation buffers, which are megabytes per batch.
var batchBuffers = sync.Pool{New: func() any { return new([]byte) }}

// DefaultInfer is the concatenate → forward → split step.
func DefaultInfer(m torch.Model, batch []*Sample) ([][]Tensor, error) {
	return DefaultInferStaged(m, batch, nil)
}

// DefaultInferStaged is DefaultInfer concatenating into st (nil: a stage lent for the call).
// A batch of one request runs on its own memory, without a copy, when its tensors are aligned
// for their element type and st is not for a GPU: there the copy into page-locked memory is
// what lets the batch cross to the device asynchronously.
func DefaultInferStaged(m torch.Model, batch []*Sample, st *Stage) ([][]Tensor, error) {
	return inferStaged(m, batch, st, outputTensors)
}

// inferStaged is DefaultInferStaged taking the tensors to split from the model's output
// with outputs.
func inferStaged(m torch.Model, batch []*Sample, st *Stage, outputs func(any) ([]*torch.Tensor, []string, error)) ([][]Tensor, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	var data [][]byte
	total := batch[0].Items
	if len(batch) == 1 && (st == nil || !st.pin) && aligned(batch[0]) {
		for _, t := range batch[0].Tensors {
			if _, err := rowSize(t, total); err != nil {
				return nil, err
			}
			data = append(data, t.Data)
		}
	} else {
		if st == nil {
			st = stages.Get().(*Stage)
			defer stages.Put(st)
		}
		var err error
		if data, total, err = st.Stack(batch); err != nil {
			return nil, err
		}
	}
	args := make([]any, len(data))
	for i, d := range data {
		first := batch[0].Tensors[i]
		shape := append([]int64{int64(total)}, first.Shape[1:]...)
		x, err := torch.FromBytes(first.DType, d, shape...)
		if err != nil {
			return nil, err
		}
		args[i] = x
	}
	out, err := m.Forward(args...)
	if err != nil {
		return nil, err
	}
	defer torch.CloseValue(out)
	outs, names, err := outputs(out)
	if err != nil {
		return nil, err
	}
	res, err := Split(outs, batch, total)
	if err != nil || names == nil {
		return res, err
	}
	for _, r := range res {
		for i := range r {
			r[i].Name = names[i]
		}
	}
	return res, nil
}

// aligned reports whether every tensor of s starts at a multiple of its element size, as
// LibTorch's kernels assume (torch.FromBytes copies one that does not).
func aligned(s *Sample) bool {
	for _, t := range s.Tensors {
		if size := t.DType.Size(); size > 1 && len(t.Data) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(t.Data)))%uintptr(size) != 0 {
			return false
		}
	}
	return true
}

func rowSize(t Tensor, items int) (int, error) {
	if len(t.Shape) == 0 || t.Shape[0] != int64(items) {
		return 0, fmt.Errorf("input of shape %v does not lead with the sample's %d items", t.Shape, items)
	}
	if int64(len(t.Data)) != t.Numel()*int64(t.DType.Size()) {
		return 0, fmt.Errorf("input of shape %v %v has %d bytes", t.Shape, t.DType, len(t.Data))
	}
	if items == 0 {
		return 0, nil
	}
	return len(t.Data) / items, nil
}

func sameTrailing(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 1; i < len(a); i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// outputTensors accepts a tensor, a tuple or list of tensors, or a dict of tensors by name,
// whose names it returns too (sorted: a TorchScript dict's order does not survive the
// binding, and a sorted one is the same from call to call).
func outputTensors(v any) ([]*torch.Tensor, []string, error) {
	switch x := v.(type) {
	case *torch.Tensor:
		return []*torch.Tensor{x}, nil, nil
	case torch.Tuple:
		t, err := tensorList(x)
		return t, nil, err
	case []any:
		t, err := tensorList(x)
		return t, nil, err
	case map[string]any:
		names := slices.Sorted(maps.Keys(x))
		out := make([]*torch.Tensor, len(names))
		for i, k := range names {
			t, ok := x[k].(*torch.Tensor)
			if !ok {
				return nil, nil, fmt.Errorf("model output %q is %s, not a tensor", k, torch.TypeName(x[k]))
			}
			out[i] = t
		}
		return out, names, nil
	}
	return nil, nil, fmt.Errorf("the model returned %s; the default handler step takes a tensor, a tuple or list of tensors, or a dict of tensors by name", torch.TypeName(v))
}

func tensorList(vs []any) ([]*torch.Tensor, error) {
	out := make([]*torch.Tensor, len(vs))
	for i, v := range vs {
		t, ok := v.(*torch.Tensor)
		if !ok {
			return nil, fmt.Errorf("model output %d is %s, not a tensor", i, torch.TypeName(v))
		}
		out[i] = t
	}
	return out, nil
}

// Split copies each sample's rows of every output into Go memory, so the native outputs
// can be freed before postprocessing.
func Split(outs []*torch.Tensor, batch []*Sample, total int) ([][]Tensor, error) {
	res := make([][]Tensor, len(batch))
	for _, o := range outs {
		c, err := o.ToCPU()
		if err != nil {
			return nil, err
		}
		if c != o {
			defer c.Close()
		}
		shape := c.Shape()
		if len(shape) == 0 || shape[0] != int64(total) {
			return nil, fmt.Errorf("model output of shape %v does not lead with the batch size %d", shape, total)
		}
		data := c.Bytes()
		row := 0
		if total > 0 {
			row = len(data) / total
		}
		off := 0
		for i, s := range batch {
			n := s.Items * row
			piece := make([]byte, n)
			copy(piece, data[off:off+n])
			off += n
			res[i] = append(res[i], Tensor{DType: c.DType(), Shape: append([]int64{int64(s.Items)}, shape[1:]...), Data: piece})
		}
	}
	return res, nil
}
