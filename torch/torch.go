package torch

// The library is looked up next to the binary first ($ORIGIN: bin/torchd beside
// bin/libtorchd_c.so), then in the source tree's bin/ so `go test` works after `make lib`;
// as DT_RPATH, searched before LD_LIBRARY_PATH.

/*
#cgo CFLAGS: -I${SRCDIR}/capi
#cgo LDFLAGS: -L${SRCDIR}/../bin -ltorchd_c -Wl,--disable-new-dtags -Wl,-rpath,$ORIGIN -Wl,-rpath,${SRCDIR}/../bin
#include <stdlib.h>
#include "torchd.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Error is an error raised inside LibTorch; Msg is LibTorch's message without its C++
// backtrace.
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "torch: " + e.Op + ": " + e.Msg }

// ErrClosed is returned by calls on a closed Module or Tensor.
var ErrClosed = errors.New("torch: use of closed object")

// statusError turns a td_error into a Go error, freeing it. It is the only place where
// native errors cross into Go.
func statusError(op string, e C.td_error) error {
	if e == nil {
		return nil
	}
	msg := C.GoString(e)
	C.td_error_free(e)
	return &Error{Op: op, Msg: msg}
}

// SetNumThreads sets LibTorch's intra-op threads for the calling OS thread's pool and the
// default for new ones.
func SetNumThreads(n int) { C.td_set_num_threads(C.int(n)) }

// SetNumThreadsHere sets the intra-op threads of the calling OS thread's forwards only, and
// returns the count LibTorch then reports on that thread (0 when n < 1). Unlike
// SetNumThreads it leaves the process default and every other thread alone and clears no
// shared cache, so a worker may call it before each forward; lock the goroutine to its
// thread first.
func SetNumThreadsHere(n int) int { return int(C.td_set_num_threads_here(C.int(n))) }

// NumThreads returns LibTorch's intra-op thread count as seen from the calling OS thread.
func NumThreads() int { return int(C.td_get_num_threads()) }

// SetNumInteropThreads sets the inter-op pool size; it fails once any parallel work has run.
func SetNumInteropThreads(n int) error {
	return statusError("set inter-op threads", C.td_set_num_interop_threads(C.int(n)))
}

// KeepFreedMemory makes the C allocator keep the memory LibTorch frees, so each forward
// reuses the pages of the last instead of faulting in fresh zeroed ones (see
// td_keep_freed_memory). It is process-wide and one-way; the daemon calls it at start unless
// keep_freed_memory is false. It reports false where the C library is not glibc.
func KeepFreedMemory() bool { return C.td_keep_freed_memory() == 1 }

// TrimArenas gives back to the operating system the free tops of the C heaps of every thread
// that has run LibTorch here, which glibc's malloc_trim never trims and KeepFreedMemory keeps
// (see td_trim_arenas). With malloc_trim after it, an idle process holds no freed memory.
// It does nothing unless KeepFreedMemory was applied.
func TrimArenas() { C.td_trim_arenas() }

// CUDAAvailable reports whether the loaded library was built with CUDA and sees a device.
func CUDAAvailable() bool { return C.td_cuda_is_available() != 0 }

// CUDADeviceCount returns the number of CUDA devices visible to LibTorch.
func CUDADeviceCount() int { return int(C.td_cuda_device_count()) }

// Version returns the LibTorch version the library was built against.
func Version() string { return C.GoString(C.td_version()) }

func cstring(s string) (*C.char, func()) {
	p := C.CString(s)
	return p, func() { C.free(unsafe.Pointer(p)) }
}
