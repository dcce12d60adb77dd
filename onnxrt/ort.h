// The C side of package onnxrt: a thin wrapper over ONNX Runtime's C API (onnxruntime_c_api.h),
// whose library is opened with dlopen by ort_init, so that nothing links it.
//
// Errors: every function that can fail returns NULL on success, or an ort_error the caller
// frees with ort_error_free. Ownership is stated at each function; nothing here keeps a
// pointer it was given past the call.
#ifndef TORCHD_ONNXRT_H
#define TORCHD_ONNXRT_H

#include <stddef.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"

// An error: ONNX Runtime's OrtErrorCode (or -1 for the wrapper's own) and its message.
typedef struct {
  int code;
  char *msg;
} ort_error;

// Frees an error returned by any function here.
void ort_error_free(ort_error *e);

// Opens the library at path, takes the OrtApi of the header's ORT_API_VERSION, and makes the
// process's one OrtEnv (logging at warning). Call it once; not thread-safe (Go serializes it).
ort_error *ort_init(const char *path);

// Wraps CreateArenaCfgV2 and CreateAndRegisterAllocator: registers with the env a CPU arena
// that holds at most max_bytes, which the sessions whose config sets
// session.use_env_allocators share. Once per process (a second registration is an error).
ort_error *ort_set_memory_limit(size_t max_bytes);

// ONNX Runtime's version string, or NULL before ort_init succeeded. Owned by the library.
const char *ort_version(void);

// Session options, as package onnxrt's Options.
typedef struct {
  int intra_op_threads;  // 0 = ONNX Runtime's default
  int inter_op_threads;
  int graph_opt_level;   // a GraphOptimizationLevel
  int parallel;          // ORT_PARALLEL if non-zero
  int mem_arena;         // -1 = default, 0 = DisableCpuMemArena, 1 = EnableCpuMemArena
  int mem_pattern;       // -1 = default, 0 = DisableMemPattern, 1 = EnableMemPattern
  const char *const *config_keys;  // AddSessionConfigEntry pairs
  const char *const *config_values;
  size_t config_count;
} ort_options;

// Wraps CreateSession. On success *out is a session the caller releases with ort_session_free.
ort_error *ort_session_new(const char *path, const ort_options *o, OrtSession **out);

// Wraps ReleaseSession.
void ort_session_free(OrtSession *s);

// Wraps SessionGetInputCount (output = 0) or SessionGetOutputCount.
ort_error *ort_session_io_count(const OrtSession *s, int output, size_t *n);

// One input or output of a session. The wrapper mallocs name, dims and dim_names (and each
// dim_names[i]); ort_io_info_free frees them.
typedef struct {
  char *name;
  int onnx_type;  // ONNXType: 1 = tensor; for any other, elem and the dims are unset
  int elem;       // ONNXTensorElementDataType
  int has_shape;  // 0 when the graph declares no shape (any rank); ndims is then 0
  size_t ndims;
  int64_t *dims;  // -1 for a dynamic dimension
  char **dim_names;
} ort_io_info;

// Wraps SessionGetInputName/TypeInfo (output = 0) or the Output ones for index.
ort_error *ort_session_io(const OrtSession *s, int output, size_t index, ort_io_info *info);

// Frees what ort_session_io malloc'd into info.
void ort_io_info_free(ort_io_info *info);

// An input of ort_run. data (nbytes) is the caller's and must stay put during the call (Go pins
// it); ONNX Runtime reads it in place. A string tensor (elem 8) has strs/str_lens instead, copied.
typedef struct {
  int elem;
  const int64_t *shape;
  size_t ndims;
  void *data;
  size_t nbytes;
  const char *const *strs;
  const size_t *str_lens;
  size_t nstrs;
} ort_input;

// Wraps CreateRunOptions, logging as the shared run options do (failed runs not at all).
// The caller frees *out with ort_run_options_free, after the run using it has returned.
ort_error *ort_run_options_new(OrtRunOptions **out);

// Wraps RunOptionsSetTerminate: the run using ro stops at its next operator (or loop
// iteration) with an error. Safe to call from any thread while the run goes on.
void ort_run_options_terminate(OrtRunOptions *ro);

// Wraps ReleaseRunOptions.
void ort_run_options_free(OrtRunOptions *ro);

// Wraps Run with run options ro (NULL: the shared ones): makes an OrtValue over each input,
// runs, releases the inputs. On success outs holds nout values the caller releases with
// ort_value_free.
ort_error *ort_run(OrtSession *s, OrtRunOptions *ro, const char *const *in_names, const ort_input *ins,
                   size_t nin, const char *const *out_names, size_t nout, OrtValue **outs);

// Wraps GetTensorTypeAndShape: the element type, the rank, up to cap dims into dims, and the
// element count. A non-tensor value is an error.
ort_error *ort_value_shape(const OrtValue *v, int *elem, size_t *ndims, int64_t *dims, size_t cap,
                           size_t *count);

// Wraps GetTensorMutableData: a pointer into the value's own buffer, valid until it is released.
ort_error *ort_value_data(OrtValue *v, void **data);

// Wraps GetStringTensorDataLength and GetStringTensorContent: *buf (malloc'd, the caller frees it,
// *len bytes) holds the count strings back to back, offsets[i] where the i-th starts.
ort_error *ort_value_strings(const OrtValue *v, size_t count, char **buf, size_t *len, size_t *offsets);

// Wraps ReleaseValue.
void ort_value_free(OrtValue *v);

#endif
