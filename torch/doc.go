// Package torch is torchd's binding to LibTorch's TorchScript runtime.
//
// It links only the small C ABI in capi/torchd.h (the library libtorchd_c), never LibTorch's
// C++ API, so one Go binary runs on a CPU or a CUDA build of that library, whichever the
// dynamic loader finds first (bin/ next to the binary, or LD_LIBRARY_PATH).
//
// What it covers is what a model server needs: load a TorchScript module on a device, run
// forward or any named method on nested values (None, bool, int, float, string, Tensor,
// Tuple, List, Dict), build tensors over Go memory without copying, read outputs without
// copying, and control LibTorch's thread pools. Every LibTorch exception comes back as an
// error carrying LibTorch's message; nothing panics.
//
// Threads. LibTorch's OpenMP keeps one intra-op pool per calling OS thread, and InferenceMode
// is thread-local. Callers that run inference at a high rate should do it on a fixed set of
// goroutines locked to their OS threads (runtime.LockOSThread), each setting its own count
// with SetNumThreadsHere (SetNumThreads is process-wide) so that the counts of the forwards
// running at once add up to the cores. On such a thread, a CPU forward whose previous run took
// 5 ms or more runs on a thread of the C library's own, one per calling thread, with the
// caller's count, while the goroutine waits parked: the Go runtime then stops polling the
// cgo call (internal/offload). The package itself never starts goroutines.
//
// The package knows nothing of HTTP, archives or handlers.
package torch
