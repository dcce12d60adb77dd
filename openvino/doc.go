// Package openvino is torchd's binding to OpenVINO's C API: read a model (OpenVINO IR, an
// .xml with its .bin, or ONNX), give its inputs a dynamic batch, compile it for the CPU with
// a precision and performance hint, and run it on tensors through infer requests.
//
// The library (libopenvino_c.so.2641, from the pinned openvino wheel: make openvino) is
// opened with dlopen on first use, never linked, so a torchd without it still starts and
// serves other models; only Compile then fails, with ErrNoLibrary and the paths it tried.
// Init takes an explicit path; otherwise TORCHD_OPENVINO_LIB, then the running executable's
// folder, then the source tree's bin/ (for go test). The library's folder must hold the rest
// of OpenVINO's (libopenvino, the CPU plugin, the IR and ONNX readers, libtbb): it finds
// them there.
//
// A Model is compiled once; each worker runs it through a Request of its own (OpenVINO's
// infer requests are not safe for concurrent use). Inputs are read in place: Infer pins each
// input's Go bytes and hands OpenVINO a tensor over them. Outputs are copied into Go memory
// before Infer returns. Every native status becomes an *Error in one place; bad input comes
// back as an error wrapping ErrBadInput, a bad model file as one wrapping ErrBadModel.
//
// Hostile models: Compile refuses an IR whose .xml is not well-formed or whose constants run
// past the .bin (OpenVINO checks both), and, before OpenVINO allocates anything, one whose
// inputs or outputs declare more than MaxElements elements a sample; the tests hold it to
// that.
//
// The package knows nothing of torchd: no HTTP, configs, batching or models' meaning.
package openvino
