package torch

/*
#include "torchd.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Tensor is an n-dimensional array that is either backed by Go memory (made by NewTensor or
// FromBytes, passed to LibTorch without copying) or owned by LibTorch (a module's output).
// A Tensor is not safe for concurrent Close and use.
type Tensor struct {
	dtype DType
	shape []int64

	// Go-backed: keep holds the slice so the GC keeps it; data is its first element.
	keep any
	// Native: h owns a LibTorch tensor; data points at its CPU elements, nil off the CPU.
	h       *C.td_tensor
	cleanup runtime.Cleanup

	data   unsafe.Pointer
	nbytes int
	closed bool
}

func numel(shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("torch: negative dimension in shape %v", shape)
		}
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("torch: shape %v overflows", shape)
		}
		n *= d
	}
	return int(n), nil
}

// NewTensor returns a tensor of the given shape over data, without copying. The caller must
// not modify data while a call that uses the tensor runs. With no shape, the tensor is 1-D.
func NewTensor[T Element](data []T, shape ...int64) (*Tensor, error) {
	if len(shape) == 0 {
		shape = []int64{int64(len(data))}
	}
	n, err := numel(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("torch: shape %v needs %d elements, data has %d", shape, n, len(data))
	}
	dt := DTypeOf[T]()
	t := &Tensor{dtype: dt, shape: append([]int64(nil), shape...), keep: data, nbytes: n * dt.Size()}
	if n > 0 {
		t.data = unsafe.Pointer(&data[0])
	}
	return t, nil
}

// FromBytes returns a tensor of dtype and shape over raw little-endian bytes, without copying
// when b is suitably aligned (it is copied otherwise, since LibTorch kernels may assume it).
func FromBytes(dtype DType, b []byte, shape ...int64) (*Tensor, error) {
	size := dtype.Size()
	if size == 0 {
		return nil, fmt.Errorf("torch: unknown dtype %v", dtype)
	}
	n, err := numel(shape)
	if err != nil {
		return nil, err
	}
	if n*size != len(b) {
		return nil, fmt.Errorf("torch: shape %v of %v needs %d bytes, data has %d", shape, dtype, n*size, len(b))
	}
	if n > 0 && uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		// An aligned copy: allocate in units of the element size.
		words := make([]uint64, (len(b)+7)/8)
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
		copy(dst, b)
		return &Tensor{dtype: dtype, shape: append([]int64(nil), shape...), keep: words, data: unsafe.Pointer(&words[0]), nbytes: len(b)}, nil
	}
	t := &Tensor{dtype: dtype, shape: append([]int64(nil), shape...), keep: b, nbytes: len(b)}
	if n > 0 {
		t.data = unsafe.Pointer(&b[0])
	}
	return t, nil
}

// newNativeTensor takes ownership of h.
func newNativeTensor(h *C.td_tensor, dtype DType, shape []int64, data unsafe.Pointer) *Tensor {
	n, _ := numel(shape)
	t := &Tensor{dtype: dtype, shape: shape, h: h, data: data, nbytes: n * dtype.Size()}
	// The cleanup is a safety net for tensors the caller forgot to Close.
	t.cleanup = runtime.AddCleanup(t, func(h *C.td_tensor) { C.td_tensor_free(h) }, h)
	return t
}

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the dimensions. The slice must not be modified.
func (t *Tensor) Shape() []int64 { return t.shape }

// Numel returns the number of elements.
func (t *Tensor) Numel() int {
	n, _ := numel(t.shape)
	return n
}

// OnCPU reports whether the tensor's elements are readable from Go.
func (t *Tensor) OnCPU() bool { return t.data != nil || t.nbytes == 0 }

// Bytes returns the tensor's elements as raw bytes without copying. The slice is valid until
// Close. It is nil for a tensor that lives on a device other than the CPU: use ToCPU.
func (t *Tensor) Bytes() []byte {
	if t.closed || t.data == nil {
		return nil
	}
	return unsafe.Slice((*byte)(t.data), t.nbytes)
}

// Data returns the elements of t as a []T without copying. It is valid until t is closed.
func Data[T Element](t *Tensor) ([]T, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if dt := DTypeOf[T](); dt != t.dtype {
		return nil, fmt.Errorf("torch: tensor is %v, not %v", t.dtype, dt)
	}
	if t.nbytes == 0 {
		return []T{}, nil
	}
	if t.data == nil {
		return nil, fmt.Errorf("torch: tensor is not on the CPU; call ToCPU first")
	}
	return unsafe.Slice((*T)(t.data), t.Numel()), nil
}

// ToCPU returns a contiguous CPU copy of a native tensor, or t itself when it is already
// readable from Go.
func (t *Tensor) ToCPU() (*Tensor, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if t.OnCPU() {
		return t, nil
	}
	var out *C.td_tensor
	var data unsafe.Pointer
	if err := statusError("to cpu", C.td_tensor_to_cpu(t.h, &out, &data)); err != nil {
		return nil, err
	}
	runtime.KeepAlive(t)
	return newNativeTensor(out, t.dtype, append([]int64(nil), t.shape...), data), nil
}

// Close releases a native tensor's memory, or drops a Go-backed tensor's reference to its
// slice. Data and Bytes views of t must not be used afterwards. Close is idempotent.
func (t *Tensor) Close() {
	if t.closed {
		return
	}
	t.closed = true
	if t.h != nil {
		t.cleanup.Stop()
		C.td_tensor_free(t.h)
		t.h = nil
	}
	t.keep, t.data = nil, nil
}

func (t *Tensor) String() string {
	return fmt.Sprintf("Tensor(%v, %v)", t.dtype, t.shape)
}
