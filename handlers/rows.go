package handlers

import (
	"fmt"

	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/torch"
)

// A batch for a runtime that takes whole tensors (ONNX Runtime, OpenVINO) is its samples'
// tensors concatenated along the rows, and its outputs cut back along the same rows.

// RunRows runs batch through run as one call when its samples' tensors differ only in rows
// (stacked into st, then cut back), else each sample alone. st is the worker's stage (nil: one
// lent for the call): reused, a batch's stacking costs a copy and no allocation. run must not
// keep its tensors' data past the call.
func RunRows(batch []*Sample, st *Stage, run func([]Tensor) ([]Tensor, error)) ([][]Tensor, error) {
	if len(batch) == 1 || !stackable(batch) {
		outs := make([][]Tensor, len(batch))
		for i, smp := range batch {
			var err error
			if outs[i], err = run(smp.Tensors); err != nil {
				return nil, err
			}
		}
		return outs, nil
	}
	if st == nil {
		st = stages.Get().(*Stage)
		defer stages.Put(st)
	}
	stacked, rows, err := st.stackRows(batch)
	if err != nil {
		return nil, err
	}
	out, err := run(stacked)
	if err != nil {
		return nil, err
	}
	return unstackRows(out, batch, rows)
}

// stackable reports whether every sample's tensors have the same types and the same shapes
// after the rows, so that they concatenate along the first dimension.
func stackable(batch []*Sample) bool {
	first := batch[0].Tensors
	for _, smp := range batch[1:] {
		if len(smp.Tensors) != len(first) {
			return false
		}
		for i, t := range smp.Tensors {
			f := first[i]
			if t.DType != f.DType || len(t.Shape) != len(f.Shape) || len(t.Shape) == 0 {
				return false
			}
			for d := 1; d < len(t.Shape); d++ {
				if t.Shape[d] != f.Shape[d] {
					return false
				}
			}
		}
	}
	return true
}

// stackRows concatenates stackable samples' tensors along the rows into the stage's buffer,
// valid until its next use; rows are each sample's.
func (s *Stage) stackRows(batch []*Sample) ([]Tensor, []int64, error) {
	rows := make([]int64, len(batch))
	for i, smp := range batch {
		rows[i] = smp.Tensors[0].Shape[0]
	}
	out := make([]Tensor, len(batch[0].Tensors))
	s.sizes = s.sizes[:0]
	need, want := 0, 0
	for i := range out {
		// Each input's own rows: the samples' inputs need not all lead with the same count.
		var n int64
		size := 0
		for _, smp := range batch {
			n += smp.Tensors[i].Shape[0]
			size += len(smp.Tensors[i].Data)
		}
		f := batch[0].Tensors[i]
		out[i] = Tensor{DType: f.DType, Shape: append([]int64{n}, f.Shape[1:]...)}
		s.sizes = append(s.sizes, size)
		need += alignUp(size)
		if n > 0 && int64(s.rows) > n {
			want += alignUp(size / int(n) * s.rows)
		}
	}
	if s.inPlace(batch) {
		for i := range out {
			out[i].Data = s.views[i]
		}
		return out, rows, nil
	}
	if err := s.grow(need, want); err != nil {
		return nil, nil, err
	}
	off := 0
	for i, size := range s.sizes {
		data := s.mem[off : off : off+size]
		for _, smp := range batch {
			data = append(data, smp.Tensors[i].Data...)
		}
		out[i].Data = data
		off += alignUp(size)
	}
	return out, rows, nil
}

// unstackRows cuts each output along its rows back into the samples'.
func unstackRows(out []Tensor, batch []*Sample, rows []int64) ([][]Tensor, error) {
	var total int64
	for _, r := range rows {
		total += r
	}
	res := make([][]Tensor, len(batch))
	for _, o := range out {
		if len(o.Shape) == 0 || o.Shape[0] != total {
			return nil, fmt.Errorf("output %q has shape %v, not %d rows first: the model does not batch along its first dimension (set max_batch_size: 0 or batch_size 1)", o.Name, o.Shape, total)
		}
		if o.DType == torch.Bytes {
			// Strings differ in length: split by elements.
			strs, err := bytestr.Split(o.Data)
			if err != nil {
				return nil, fmt.Errorf("output %q: %v", o.Name, err)
			}
			per := int64(len(strs)) / total
			var at int64
			for i, r := range rows {
				t := Tensor{DType: o.DType, Name: o.Name, Shape: append([]int64{r}, o.Shape[1:]...), Data: bytestr.Join(strs[at*per : (at+r)*per])}
				res[i] = append(res[i], t)
				at += r
			}
			continue
		}
		rowBytes := int64(len(o.Data)) / total
		var at int64
		for i, r := range rows {
			t := Tensor{DType: o.DType, Name: o.Name, Shape: append([]int64{r}, o.Shape[1:]...), Data: o.Data[at*rowBytes : (at+r)*rowBytes : (at+r)*rowBytes]}
			res[i] = append(res[i], t)
			at += r
		}
	}
	return res, nil
}
