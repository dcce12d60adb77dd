package handlers

import (
	"fmt"

	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/torch"
)

// A batch for a runtime that takes whole tensors (ONNX Runtime, OpenVINO) is its samples'
// tensors concatenated along the rows, and its outputs cut back along the same rows.

// RunRows runs batch through run as one call when its samples' tensors differ only in rows
// (stacked, then cut back), else each sample alone.
func RunRows(batch []*Sample, run func([]Tensor) ([]Tensor, error)) ([][]Tensor, error) {
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
	stacked, rows := stackRows(batch)
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

// stackRows concatenates the samples' tensors along the rows; rows are each sample's.
func stackRows(batch []*Sample) ([]Tensor, []int64) {
	rows := make([]int64, len(batch))
	for i, smp := range batch {
		rows[i] = smp.Tensors[0].Shape[0]
	}
	out := make([]Tensor, len(batch[0].Tensors))
	for i := range out {
		var n int64
		size := 0
		for _, smp := range batch {
			n += smp.Tensors[i].Shape[0]
			size += len(smp.Tensors[i].Data)
		}
		data := make([]byte, 0, size)
		for _, smp := range batch {
			data = append(data, smp.Tensors[i].Data...)
		}
		f := batch[0].Tensors[i]
		shape := append([]int64{n}, f.Shape[1:]...)
		out[i] = Tensor{DType: f.DType, Shape: shape, Data: data}
	}
	return out, rows
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
