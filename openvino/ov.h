// The C side of package openvino: a thin wrapper over OpenVINO's C API (openvino/c/openvino.h),
// whose library is opened with dlopen by ovw_init, so that nothing links it.
//
// Errors: every function that can fail returns NULL on success, or an ovw_error the caller
// frees with ovw_error_free. OpenVINO keeps its message per thread, so each function here
// reads it before returning, on the thread that failed. Ownership is stated at each function;
// nothing here keeps a pointer it was given past the call.
#ifndef TORCHD_OPENVINO_H
#define TORCHD_OPENVINO_H

#include <stddef.h>
#include <stdint.h>

#include "openvino/c/openvino.h"

// An error: OpenVINO's ov_status_e (or 1 for the wrapper's own) and its message.
typedef struct {
  int code;
  char *msg;
} ovw_error;

// Frees an error returned by any function here.
void ovw_error_free(ovw_error *e);

// Opens libopenvino_c at path (its folder holds libopenvino, the CPU plugin and libtbb, which
// it finds by its $ORIGIN rpath) and makes the process's one ov_core_t. Call it once; not
// thread-safe (Go serializes it).
ovw_error *ovw_init(const char *path);

// OpenVINO's build number ("2026.4.1-..."), malloc'd (the caller frees it), or NULL.
char *ovw_version(void);

// One input or output of a model. The wrapper mallocs name and dims; ovw_io_free frees them.
typedef struct {
  char *name;       // the port's first tensor name, "" when it has none
  int elem;         // ov_element_type_e
  int64_t rank;     // -1 when the rank is dynamic
  int64_t *dims;    // rank of them, -1 for a dynamic dimension
} ovw_io;

// Frees what ovw_model_io malloc'd into info.
void ovw_io_free(ovw_io *info);

// Wraps ov_core_read_model: an IR (xml, with bin; bin NULL: the xml's name with .bin) or an
// ONNX file (bin NULL). On success *out is a model the caller frees with ovw_model_free.
ovw_error *ovw_read_model(const char *xml, const char *bin, ov_model_t **out);

// Wraps ov_model_free.
void ovw_model_free(ov_model_t *m);

// Wraps ov_model_inputs_size (output = 0) or ov_model_outputs_size.
ovw_error *ovw_model_io_count(const ov_model_t *m, int output, size_t *n);

// The name, element type and partial shape of input (output = 0) or output index of m.
ovw_error *ovw_model_io(const ov_model_t *m, int output, size_t index, ovw_io *info);

// Wraps ov_model_reshape_by_port_indexes: every input whose rank is known and at least 1
// gets the first dimension [lo, hi], its others unchanged: -1, -1 a dynamic one (the batch of
// dynamic batching), lo == hi a static batch.
ovw_error *ovw_model_batch(const ov_model_t *m, int64_t lo, int64_t hi);

// Compile properties, as package openvino's Options. NULL or 0 leaves OpenVINO's default.
typedef struct {
  const char *precision;    // INFERENCE_PRECISION_HINT: "f32", "bf16", "f16"
  const char *hint;         // PERFORMANCE_HINT: "LATENCY", "THROUGHPUT"
  const char *streams;      // NUM_STREAMS: a number or "AUTO"
  const char *threads;      // INFERENCE_NUM_THREADS: a number
  const char *pinning;      // ENABLE_CPU_PINNING: "YES", "NO"
} ovw_options;

// Wraps ov_core_compile_model for "CPU" with the options set. On success *out is a compiled
// model the caller frees with ovw_compiled_free. m stays the caller's.
ovw_error *ovw_compile(const ov_model_t *m, const ovw_options *o, ov_compiled_model_t **out);

// Wraps ov_compiled_model_free.
void ovw_compiled_free(ov_compiled_model_t *c);

// Wraps ov_compiled_model_get_property; *value is malloc'd (the caller frees it).
ovw_error *ovw_compiled_property(const ov_compiled_model_t *c, const char *key, char **value);

// Wraps ov_compiled_model_create_infer_request; the caller frees *out with ovw_request_free.
ovw_error *ovw_request_new(const ov_compiled_model_t *c, ov_infer_request_t **out);

// Wraps ov_infer_request_free.
void ovw_request_free(ov_infer_request_t *r);

// An input of ovw_infer. data (nbytes, the shape's elements) is the caller's and must stay
// put during the call (Go pins it); OpenVINO reads it in place.
typedef struct {
  int elem;
  const int64_t *shape;
  size_t ndims;
  void *data;
} ovw_input;

// Sets input i of r to a tensor over ins[i]'s buffer (ov_tensor_create_from_host_ptr),
// runs the request (ov_infer_request_infer), and leaves its outputs in r for ovw_output.
ovw_error *ovw_infer(ov_infer_request_t *r, const ovw_input *ins, size_t nin);

// Wraps ov_infer_request_cancel: the request's running inference stops with an error. Safe
// from any thread while it runs.
void ovw_cancel(ov_infer_request_t *r);

// Output index of r's last inference: its element type, its rank, up to cap dims, a pointer
// into the request's own buffer (valid until the next inference) and its bytes.
ovw_error *ovw_output(ov_infer_request_t *r, size_t index, int *elem, size_t *ndims, int64_t *dims,
                      size_t cap, void **data, size_t *nbytes);

#endif
