package handlers

import (
	"fmt"
	"slices"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/torch"
)

// padPlan is how a batch of requests whose inputs differ in a variable dimension (a sequence
// length: a declared -1 past the batch dimension) share one forward: each input is padded
// with zeros to the batch's longest in those dimensions, and each request's outputs are cut
// back to its own length in the output dimensions that followed the padding. Zero is the
// padding BERT-style models expect (the [PAD] id, and an attention mask that hides it);
// a model that zero padding changes should be served with batch_size 1.
type padPlan struct {
	ins [][]bool // ins[i][d]: input i's dimension d may be padded
	// outs[j][d]: output j's dimension d is variable (cut back to the request's length when
	// it has the padded length); nil when the outputs are undeclared, where the dimension of
	// the same index as a padded input dimension is.
	outs [][]bool
}

// newPadPlan returns the plan for the declared inputs and outputs; nil when no input has a
// variable dimension past the batch's.
func newPadPlan(ins, outs []archive.TensorSpec) *padPlan {
	p := &padPlan{}
	any := false
	for _, in := range ins {
		v := variableDims(in.Shape)
		any = any || slices.Contains(v, true)
		p.ins = append(p.ins, v)
	}
	if !any {
		return nil
	}
	if len(outs) > 0 {
		for _, o := range outs {
			p.outs = append(p.outs, variableDims(o.Shape))
		}
	}
	return p
}

func variableDims(shape []int64) []bool {
	v := make([]bool, len(shape))
	for d := 1; d < len(shape); d++ {
		v[d] = shape[d] < 0
	}
	return v
}

// padder is implemented by handlers whose batches may need padding.
type padder interface{ padding() *padPlan }

func (h *TensorHandler) padding() *padPlan { return h.pad }

// sameShapes reports whether the samples of batch agree on every input's trailing shape.
func sameShapes(batch []*Sample) bool {
	for _, s := range batch[1:] {
		if len(s.Tensors) != len(batch[0].Tensors) {
			return false
		}
		for i, t := range s.Tensors {
			if !sameTrailing(t.Shape, batch[0].Tensors[i].Shape) {
				return false
			}
		}
	}
	return true
}

// inferPadded runs a batch whose samples differ in padded dimensions: pads, runs the default
// step, and cuts each sample's outputs back to its own lengths.
func inferPadded(p *padPlan, m torch.Model, batch []*Sample, st *Stage) ([][]Tensor, error) {
	nIn := len(batch[0].Tensors)
	target := make([][]int64, nIn)
	for i := range nIn {
		first := batch[0].Tensors[i]
		target[i] = slices.Clone(first.Shape)
		for _, s := range batch[1:] {
			if len(s.Tensors) != nIn {
				return nil, fmt.Errorf("samples of one batch have %d and %d inputs", nIn, len(s.Tensors))
			}
			t := s.Tensors[i]
			if t.DType != first.DType || len(t.Shape) != len(first.Shape) {
				return nil, fmt.Errorf("input %d: a sample of %v %v cannot batch with %v %v", i, t.DType, t.Shape, first.DType, first.Shape)
			}
			for d := 1; d < len(t.Shape); d++ {
				if t.Shape[d] == target[i][d] {
					continue
				}
				if i >= len(p.ins) || d >= len(p.ins[i]) || !p.ins[i][d] {
					return nil, fmt.Errorf("input %d: a sample of %v %v cannot batch with %v %v", i, t.DType, t.Shape, first.DType, first.Shape)
				}
				target[i][d] = max(target[i][d], t.Shape[d])
			}
		}
	}
	padded := make([]*Sample, len(batch))
	for k, s := range batch {
		ps := &Sample{Items: s.Items, Tensors: make([]Tensor, nIn)}
		for i, t := range s.Tensors {
			want := append([]int64{t.Shape[0]}, target[i][1:]...)
			ps.Tensors[i] = resize(t, want)
		}
		padded[k] = ps
	}
	outs, err := DefaultInferStaged(m, padded, st)
	if err != nil {
		return nil, err
	}
	for k, s := range batch {
		for j, o := range outs[k] {
			shape := slices.Clone(o.Shape)
			for d := 1; d < len(shape); d++ {
				shape[d] = p.ownLength(s, target, j, d, shape[d])
			}
			if !slices.Equal(shape, o.Shape) {
				c := resize(o, shape)
				c.Name = o.Name
				outs[k][j] = c
			}
		}
	}
	return outs, nil
}

// ownLength is the length sample s has in output j's dimension d of size n: its own length
// in an input dimension that was padded to n, where d is variable.
func (p *padPlan) ownLength(s *Sample, target [][]int64, j, d int, n int64) int64 {
	if p.outs != nil && (j >= len(p.outs) || d >= len(p.outs[j]) || !p.outs[j][d]) {
		return n
	}
	for i, t := range s.Tensors {
		for e := 1; e < len(t.Shape); e++ {
			if target[i][e] != n || t.Shape[e] == n || !p.ins[i][e] {
				continue
			}
			if p.outs == nil && e != d {
				continue
			}
			return t.Shape[e]
		}
	}
	return n
}

// resize copies t into a tensor of shape, of the same rank: what lies outside t is zero, what
// lies outside shape is cut. t is returned as it is when the shapes agree.
func resize(t Tensor, shape []int64) Tensor {
	if slices.Equal(t.Shape, shape) {
		return t
	}
	es := int64(t.DType.Size())
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	out := Tensor{DType: t.DType, Shape: shape, Data: make([]byte, n*es)}
	copyRegion(out.Data, shape, t.Data, t.Shape, es)
	return out
}

// copyRegion copies the part of src (row-major, sshape) that lies inside dshape into dst.
func copyRegion(dst []byte, dshape []int64, src []byte, sshape []int64, es int64) {
	if len(dshape) == 0 {
		copy(dst[:es], src[:es])
		return
	}
	if len(dshape) == 1 {
		n := min(dshape[0], sshape[0]) * es
		copy(dst[:n], src[:n])
		return
	}
	dstride, sstride := es, es
	for _, d := range dshape[1:] {
		dstride *= d
	}
	for _, d := range sshape[1:] {
		sstride *= d
	}
	for i := range min(dshape[0], sshape[0]) {
		copyRegion(dst[i*dstride:], dshape[1:], src[i*sstride:], sshape[1:], es)
	}
}
