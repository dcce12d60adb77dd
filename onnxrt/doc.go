// Package onnxrt is torchd's binding to ONNX Runtime's C API: load an .onnx model into a
// session, read its inputs and outputs, and run it on tensors.
//
// The library (libonnxruntime.so.1.31.1, from the pinned onnxruntime wheel: make onnxruntime)
// is opened with dlopen on first use, never linked, so a torchd without it still starts and
// serves PyTorch models; only NewSession then fails, with ErrNoLibrary and the paths it tried.
// Init takes an explicit path; otherwise TORCHD_ONNXRUNTIME_LIB, then the running
// executable's folder, then the source tree's bin/ (for go test).
//
// Inputs are read in place: Run pins each input's Go bytes (runtime.Pinner) and hands ONNX
// Runtime a tensor over them. Outputs are copied into Go memory once and their native values
// released before Run returns. Every native status becomes an *Error in one place; nothing
// panics on bad input, which comes back as an error wrapping ErrBadInput. Run may be called from
// many goroutines on one Session, as ONNX Runtime's Run may; Close waits for them. RunContext
// stops a run when its context ends (ONNX Runtime's terminate flag), for deadlines.
//
// Hostile models: ONNX Runtime 1.31 itself refuses truncated files, initializers whose
// declared size overflows, disagrees with their data or runs past their external file, and
// external data outside the model's folder (absolute, "..", or a link out); the tests hold it
// to that. What a graph allocates while it runs is bounded only by SetMemoryLimit.
//
// The package knows nothing of torchd: no HTTP, configs, batching or models' meaning.
package onnxrt
