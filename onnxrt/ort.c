// See ort.h. Every OrtStatus is turned into an ort_error by from_status, the one place.
#include "ort.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const OrtApiBase *base;
static const OrtApi *api;
static OrtEnv *env;
static OrtMemoryInfo *cpu;
static OrtAllocator *alloc;
// Shared by every Run (read-only there): ONNX Runtime would log each failed run at error
// level, and Run returns that error, so a client sending bad tensors cannot flood the log.
static OrtRunOptions *run_opts;

// Returned when an error cannot be allocated: a NULL would read as success.
static char oom_msg[] = "out of memory";
static ort_error oom_error = {-1, oom_msg};

static ort_error *new_error(int code, const char *msg) {
  ort_error *e = malloc(sizeof *e);
  if (e == NULL) return &oom_error;
  e->code = code;
  e->msg = strdup(msg ? msg : "");
  if (e->msg == NULL) {
    free(e);
    return &oom_error;
  }
  return e;
}

// Takes ownership of st (releases it); NULL for a NULL status.
static ort_error *from_status(OrtStatus *st) {
  if (st == NULL) return NULL;
  ort_error *e = new_error((int)api->GetErrorCode(st), api->GetErrorMessage(st));
  api->ReleaseStatus(st);
  return e;
}

static ort_error *oom(void) { return new_error(-1, "out of memory"); }

void ort_error_free(ort_error *e) {
  if (e == NULL || e == &oom_error) return;
  free(e->msg);
  free(e);
}

ort_error *ort_init(const char *path) {
  if (api != NULL) return NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *m = dlerror();
    return new_error(-1, m ? m : "dlopen failed");
  }
  const OrtApiBase *(*get_base)(void) = (const OrtApiBase *(*)(void))dlsym(h, "OrtGetApiBase");
  if (get_base == NULL) {
    dlclose(h);
    return new_error(-1, "the library has no OrtGetApiBase: not ONNX Runtime");
  }
  const OrtApiBase *b = get_base();
  const OrtApi *a = b ? b->GetApi(ORT_API_VERSION) : NULL;
  if (a == NULL) {
    char m[160];
    snprintf(m, sizeof m, "ONNX Runtime %s does not serve API version %d (1.%d or newer does)",
             b ? b->GetVersionString() : "?", ORT_API_VERSION, ORT_API_VERSION);
    dlclose(h);
    return new_error(-1, m);
  }
  api = a;
  OrtStatus *st = api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "torchd", &env);
  if (st == NULL) st = api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu);
  if (st == NULL) st = api->GetAllocatorWithDefaultOptions(&alloc);
  if (st == NULL) st = api->CreateRunOptions(&run_opts);
  if (st == NULL) st = api->RunOptionsSetRunLogSeverityLevel(run_opts, ORT_LOGGING_LEVEL_FATAL);
  if (st != NULL) {
    ort_error *e = from_status(st);
    if (run_opts != NULL) api->ReleaseRunOptions(run_opts);
    if (cpu != NULL) api->ReleaseMemoryInfo(cpu);
    if (env != NULL) api->ReleaseEnv(env);
    run_opts = NULL, cpu = NULL, env = NULL, api = NULL;
    dlclose(h);
    return e;
  }
  base = b;  // the handle stays open for the process's life
  return NULL;
}

ort_error *ort_set_memory_limit(size_t max_bytes) {
  const char *keys[] = {"max_mem", "arena_extend_strategy"};
  // kSameAsRequested (1): the arena grows by what a tensor needs, so the limit is not reached
  // early by doubling.
  size_t values[] = {max_bytes, 1};
  OrtArenaCfg *cfg = NULL;
  OrtMemoryInfo *info = NULL;
  OrtStatus *st = api->CreateArenaCfgV2(keys, values, 2, &cfg);
  if (st == NULL) st = api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &info);
  if (st == NULL) st = api->CreateAndRegisterAllocator(env, info, cfg);
  if (info != NULL) api->ReleaseMemoryInfo(info);
  if (cfg != NULL) api->ReleaseArenaCfg(cfg);
  return from_status(st);
}

const char *ort_version(void) { return base ? base->GetVersionString() : NULL; }

ort_error *ort_session_new(const char *path, const ort_options *o, OrtSession **out) {
  OrtSessionOptions *so = NULL;
  OrtStatus *st = api->CreateSessionOptions(&so);
  if (st == NULL && o->intra_op_threads > 0) st = api->SetIntraOpNumThreads(so, o->intra_op_threads);
  if (st == NULL && o->inter_op_threads > 0) st = api->SetInterOpNumThreads(so, o->inter_op_threads);
  if (st == NULL) st = api->SetSessionGraphOptimizationLevel(so, (GraphOptimizationLevel)o->graph_opt_level);
  if (st == NULL && o->parallel) st = api->SetSessionExecutionMode(so, ORT_PARALLEL);
  if (st == NULL && o->mem_arena >= 0) st = o->mem_arena ? api->EnableCpuMemArena(so) : api->DisableCpuMemArena(so);
  if (st == NULL && o->mem_pattern >= 0) st = o->mem_pattern ? api->EnableMemPattern(so) : api->DisableMemPattern(so);
  for (size_t i = 0; st == NULL && i < o->config_count; i++)
    st = api->AddSessionConfigEntry(so, o->config_keys[i], o->config_values[i]);
  if (st == NULL) st = api->CreateSession(env, path, so, out);
  if (so != NULL) api->ReleaseSessionOptions(so);
  return from_status(st);
}

void ort_session_free(OrtSession *s) {
  if (s != NULL) api->ReleaseSession(s);
}

ort_error *ort_session_io_count(const OrtSession *s, int output, size_t *n) {
  return from_status(output ? api->SessionGetOutputCount(s, n) : api->SessionGetInputCount(s, n));
}

ort_error *ort_session_io(const OrtSession *s, int output, size_t index, ort_io_info *info) {
  memset(info, 0, sizeof *info);
  char *name = NULL;
  OrtTypeInfo *ti = NULL;
  OrtStatus *st = output ? api->SessionGetOutputName(s, index, alloc, &name)
                         : api->SessionGetInputName(s, index, alloc, &name);
  if (st != NULL) return from_status(st);
  info->name = strdup(name);
  OrtStatus *fs = api->AllocatorFree(alloc, name);
  if (fs != NULL) api->ReleaseStatus(fs);
  if (info->name == NULL) return oom();
  st = output ? api->SessionGetOutputTypeInfo(s, index, &ti) : api->SessionGetInputTypeInfo(s, index, &ti);
  enum ONNXType t = ONNX_TYPE_UNKNOWN;
  if (st == NULL) st = api->GetOnnxTypeFromTypeInfo(ti, &t);
  info->onnx_type = (int)t;
  if (st == NULL && t == ONNX_TYPE_TENSOR) {
    const OrtTensorTypeAndShapeInfo *tsi = NULL;  // owned by ti
    enum ONNXTensorElementDataType elem = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t n = 0;
    st = api->CastTypeInfoToTensorInfo(ti, &tsi);
    if (st == NULL) st = api->GetTensorElementType(tsi, &elem);
    if (st == NULL) info->has_shape = api->TensorTypeAndShape_HasShape(tsi);
    if (st == NULL) st = api->GetDimensionsCount(tsi, &n);
    info->elem = (int)elem;
    if (st == NULL && n > 0) {
      info->dims = calloc(n, sizeof(int64_t));
      info->dim_names = calloc(n, sizeof(char *));
      const char **names = calloc(n, sizeof(char *));  // owned by tsi
      if (info->dims == NULL || info->dim_names == NULL || names == NULL) {
        free(names);
        api->ReleaseTypeInfo(ti);
        return oom();
      }
      info->ndims = n;
      st = api->GetDimensions(tsi, info->dims, n);
      if (st == NULL) st = api->GetSymbolicDimensions(tsi, names, n);
      for (size_t i = 0; st == NULL && i < n; i++) info->dim_names[i] = strdup(names[i] ? names[i] : "");
      free(names);
    }
  }
  if (ti != NULL) api->ReleaseTypeInfo(ti);
  return from_status(st);
}

void ort_io_info_free(ort_io_info *info) {
  free(info->name);
  for (size_t i = 0; info->dim_names != NULL && i < info->ndims; i++) free(info->dim_names[i]);
  free(info->dim_names);
  free(info->dims);
  memset(info, 0, sizeof *info);
}

// Makes the OrtValue of one input: over the caller's buffer, or a string tensor holding copies.
static OrtStatus *make_input(const ort_input *in, OrtValue **v) {
  if (in->elem != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
    static char empty[8];  // ONNX Runtime wants a buffer even for zero elements
    void *p = in->nbytes ? in->data : empty;
    return api->CreateTensorWithDataAsOrtValue(cpu, p, in->nbytes, in->shape, in->ndims,
                                               (ONNXTensorElementDataType)in->elem, v);
  }
  OrtStatus *st = api->CreateTensorAsOrtValue(alloc, in->shape, in->ndims, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, v);
  // GetResizedStringTensorElementBuffer takes a length, so strings may hold any byte, NUL too.
  for (size_t i = 0; st == NULL && i < in->nstrs; i++) {
    char *buf = NULL;
    st = api->GetResizedStringTensorElementBuffer(*v, i, in->str_lens[i], &buf);
    if (st == NULL && in->str_lens[i] > 0) memcpy(buf, in->strs[i], in->str_lens[i]);
  }
  return st;
}

ort_error *ort_run_options_new(OrtRunOptions **out) {
  OrtStatus *st = api->CreateRunOptions(out);
  if (st == NULL) st = api->RunOptionsSetRunLogSeverityLevel(*out, ORT_LOGGING_LEVEL_FATAL);
  if (st != NULL && *out != NULL) {
    api->ReleaseRunOptions(*out);
    *out = NULL;
  }
  return from_status(st);
}

void ort_run_options_terminate(OrtRunOptions *ro) {
  OrtStatus *st = api->RunOptionsSetTerminate(ro);
  if (st != NULL) api->ReleaseStatus(st);  // it only sets a flag; nothing to report
}

void ort_run_options_free(OrtRunOptions *ro) {
  if (ro != NULL) api->ReleaseRunOptions(ro);
}

ort_error *ort_run(OrtSession *s, OrtRunOptions *ro, const char *const *in_names, const ort_input *ins,
                   size_t nin, const char *const *out_names, size_t nout, OrtValue **outs) {
  OrtValue **vals = calloc(nin ? nin : 1, sizeof(OrtValue *));
  if (vals == NULL) return oom();
  OrtStatus *st = NULL;
  for (size_t i = 0; st == NULL && i < nin; i++) st = make_input(&ins[i], &vals[i]);
  for (size_t i = 0; i < nout; i++) outs[i] = NULL;
  if (st == NULL) st = api->Run(s, ro ? ro : run_opts, in_names, (const OrtValue *const *)vals, nin, out_names, nout, outs);
  for (size_t i = 0; i < nin; i++)
    if (vals[i] != NULL) api->ReleaseValue(vals[i]);
  free(vals);
  if (st != NULL) {
    for (size_t i = 0; i < nout; i++)
      if (outs[i] != NULL) api->ReleaseValue(outs[i]), outs[i] = NULL;
  }
  return from_status(st);
}

ort_error *ort_value_shape(const OrtValue *v, int *elem, size_t *ndims, int64_t *dims, size_t cap,
                           size_t *count) {
  enum ONNXType t = ONNX_TYPE_UNKNOWN;
  OrtStatus *st = api->GetValueType(v, &t);
  if (st != NULL) return from_status(st);
  if (t != ONNX_TYPE_TENSOR) return new_error(-1, "is not a tensor (a sequence, map or optional); this binding reads tensors only");
  OrtTensorTypeAndShapeInfo *tsi = NULL;
  enum ONNXTensorElementDataType e = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  st = api->GetTensorTypeAndShape(v, &tsi);
  if (st == NULL) st = api->GetTensorElementType(tsi, &e);
  if (st == NULL) st = api->GetDimensionsCount(tsi, ndims);
  if (st == NULL && *ndims <= cap) st = api->GetDimensions(tsi, dims, *ndims);
  if (st == NULL) st = api->GetTensorShapeElementCount(tsi, count);
  *elem = (int)e;
  if (tsi != NULL) api->ReleaseTensorTypeAndShapeInfo(tsi);
  return from_status(st);
}

ort_error *ort_value_data(OrtValue *v, void **data) { return from_status(api->GetTensorMutableData(v, data)); }

ort_error *ort_value_strings(const OrtValue *v, size_t count, char **buf, size_t *len, size_t *offsets) {
  *buf = NULL;
  *len = 0;
  if (count == 0) return NULL;
  OrtStatus *st = api->GetStringTensorDataLength(v, len);
  if (st != NULL) return from_status(st);
  *buf = malloc(*len ? *len : 1);
  if (*buf == NULL) return oom();
  st = api->GetStringTensorContent(v, *buf, *len, offsets, count);
  if (st != NULL) {
    free(*buf);
    *buf = NULL;
  }
  return from_status(st);
}

void ort_value_free(OrtValue *v) {
  if (v != NULL) api->ReleaseValue(v);
}
