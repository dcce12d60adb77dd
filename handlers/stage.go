package handlers

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/torchd/torchd/torch"
)

// Stage is one worker's staging buffer: the memory a batch's inputs are stacked into for one
// forward. It is allocated once, for the largest batch seen (at least rows rows), and reused
// for every batch after: the stacking overwrites every byte the forward reads, so the buffer
// is never zeroed again. With pin it is page-locked memory (torch.NewHostBuffer) so that a
// batch crosses to a GPU asynchronously; where there is no CUDA device it is ordinary memory.
// A Stage belongs to one goroutine.
type Stage struct {
	pin  bool
	rows int // rows to size the first buffer for

	mem    []byte            // the buffer: Go memory, or host's
	host   *torch.HostBuffer // when pinned memory was asked for
	allocs int
	// inPlaces counts the batches that ran where their inputs lay (inPlace).
	inPlaces int

	views [][]byte // each input's stacked bytes, reused by Stack
	sizes []int
}

// NewStage returns an empty stage; its buffer is allocated by the first Stack, for at least
// rows rows of that batch's row size (e.g. the model's batch size).
func NewStage(pin bool, rows int) *Stage { return &Stage{pin: pin, rows: max(rows, 1)} }

// Allocs returns how many times the buffer has been allocated.
func (s *Stage) Allocs() int { return s.allocs }

// Held reports whether the stage holds a buffer (Close frees it).
func (s *Stage) Held() bool { return s.mem != nil }

// Pinned reports whether the buffer is page-locked memory.
func (s *Stage) Pinned() bool { return s.host != nil && s.host.Pinned() }

// Close frees the buffer. The stage may be used again, and allocates anew.
func (s *Stage) Close() {
	if s.host != nil {
		s.host.Close()
		s.host = nil
	}
	s.mem = nil
}

// stageAlign keeps each input's start aligned for any element type and for vector loads.
const stageAlign = 64

// Stack checks that the samples of batch agree on their inputs' dtypes and trailing shapes
// and copies each input's rows, sample after sample, into the buffer. It returns each input's
// stacked bytes, valid until the next Stack or Close, and the batch's total rows.
func (s *Stage) Stack(batch []*Sample) ([][]byte, int, error) {
	if len(batch) == 0 {
		return nil, 0, nil
	}
	nIn := len(batch[0].Tensors)
	total := 0
	for _, smp := range batch {
		if len(smp.Tensors) != nIn {
			return nil, 0, fmt.Errorf("samples of one batch have %d and %d inputs", nIn, len(smp.Tensors))
		}
		total += smp.Items
	}
	s.sizes = s.sizes[:0]
	need, rowsNeed := 0, 0
	for i := range nIn {
		first := batch[0].Tensors[i]
		rowBytes, err := rowSize(first, batch[0].Items)
		if err != nil {
			return nil, 0, err
		}
		for _, smp := range batch[1:] {
			t := smp.Tensors[i]
			if t.DType != first.DType || !sameTrailing(t.Shape, first.Shape) {
				return nil, 0, fmt.Errorf("input %d: a sample of %v %v cannot batch with %v %v", i, t.DType, t.Shape, first.DType, first.Shape)
			}
			if _, err := rowSize(t, smp.Items); err != nil {
				return nil, 0, err
			}
		}
		s.sizes = append(s.sizes, rowBytes*total)
		need += alignUp(rowBytes * total)
		rowsNeed += alignUp(rowBytes * max(total, s.rows))
	}
	if s.inPlace(batch) {
		return s.views, total, nil
	}
	if err := s.grow(need, rowsNeed); err != nil {
		return nil, 0, err
	}
	s.views = s.views[:0]
	off := 0
	for i, size := range s.sizes {
		dst := s.mem[off : off+size : off+size]
		n := 0
		for _, smp := range batch {
			n += copy(dst[n:], smp.Tensors[i].Data)
		}
		s.views = append(s.views, dst)
		off += alignUp(size)
	}
	return s.views, total, nil
}

// inPlace sets views to the batch's inputs where they already lie one after another, in the
// batch's order, each in one buffer (the rows core lends, handlers.Request.Row): the batch
// then runs on that memory, and nothing is copied. A stage for a GPU copies all the same,
// into its page-locked memory.
func (s *Stage) inPlace(batch []*Sample) bool {
	if s.pin || len(batch) < 2 || !aligned(batch[0]) {
		return false
	}
	s.views = s.views[:0]
	for i := range batch[0].Tensors {
		v, ok := laidOut(batch, i)
		if !ok {
			return false
		}
		s.views = append(s.views, v)
	}
	s.inPlaces++
	return true
}

// laidOut returns input i of the batch as one slice where each sample's follows the one
// before in the same buffer: that of the first, whose capacity spans the rest.
func laidOut(batch []*Sample, i int) ([]byte, bool) {
	first := batch[0].Tensors[i].Data
	if len(first) == 0 {
		return nil, false
	}
	whole := first[:cap(first)]
	n := len(first)
	for _, smp := range batch[1:] {
		d := smp.Tensors[i].Data
		if len(d) == 0 || n+len(d) > len(whole) || &whole[n] != &d[0] {
			return nil, false
		}
		n += len(d)
	}
	return whole[:n:n], true
}

// InPlace returns how many batches ran on their samples' own memory, not copied.
func (s *Stage) InPlace() int {
	if s == nil {
		return 0
	}
	return s.inPlaces
}

func alignUp(n int) int { return (n + stageAlign - 1) / stageAlign * stageAlign }

// grow makes the buffer hold need bytes; a new one is sized for want (the first batch's
// rows, or the stage's rows if more).
func (s *Stage) grow(need, want int) error {
	if len(s.mem) >= need {
		return nil
	}
	s.Close()
	size := max(need, want)
	s.allocs++
	if s.pin {
		h, err := torch.NewHostBuffer(size+stageAlign, true)
		if err != nil {
			return fmt.Errorf("staging buffer of %d bytes: %w", size, err)
		}
		s.host = h
		b := h.Bytes()
		// LibTorch's allocators align far more than this; the check keeps the promise local.
		skip := (stageAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%stageAlign)) % stageAlign
		s.mem = b[skip : skip+size]
		return nil
	}
	s.mem = make([]byte, size)
	return nil
}

// stages lends unpinned stages to the callers that run a batch without a worker's own
// (warm-up, the tuner, bench-model).
var stages = sync.Pool{New: func() any { return NewStage(false, 1) }}
