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

// HostBuffer is CPU memory allocated by LibTorch, in which a worker stages a batch's inputs.
// Pinned (page-locked) memory lets an input built over it with FromBytes cross to a CUDA
// device asynchronously; the run that takes it waits for the copy before it returns, so the
// buffer may be rewritten for the next batch right after. A HostBuffer is not safe for
// concurrent Close and use.
type HostBuffer struct {
	h       *C.td_tensor
	cleanup runtime.Cleanup
	data    unsafe.Pointer
	n       int
	pinned  bool
}

// NewHostBuffer allocates n bytes of CPU memory, pinned when pin is set and LibTorch has a
// CUDA device; on a CPU build or a machine without a GPU it is ordinary memory, with no error
// (Pinned says which). Its contents are not zeroed.
func NewHostBuffer(n int, pin bool) (*HostBuffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("torch: host buffer of negative size %d", n)
	}
	var h *C.td_tensor
	var data unsafe.Pointer
	var pinned C.int
	p := C.int(0)
	if pin {
		p = 1
	}
	if err := statusError("host buffer", C.td_host_buffer(C.int64_t(n), p, &h, &data, &pinned)); err != nil {
		return nil, err
	}
	b := &HostBuffer{h: h, data: data, n: n, pinned: pinned != 0}
	// A safety net for a buffer its owner forgot to Close.
	b.cleanup = runtime.AddCleanup(b, func(h *C.td_tensor) { C.td_tensor_free(h) }, h)
	return b, nil
}

// Bytes returns the buffer's memory, valid until Close.
func (b *HostBuffer) Bytes() []byte {
	if b.h == nil || b.n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.data), b.n)
}

// Pinned reports whether the memory is page-locked.
func (b *HostBuffer) Pinned() bool { return b.pinned }

// Close frees the memory; Bytes views of it must not be used afterwards. Close is idempotent.
func (b *HostBuffer) Close() {
	if b.h == nil {
		return
	}
	b.cleanup.Stop()
	C.td_tensor_free(b.h)
	b.h, b.data = nil, nil
}
