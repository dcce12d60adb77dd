// See ov.h. Every ov_status_e becomes an ovw_error in fail(), the one place, with the message
// OpenVINO left on this thread.
#include "ov.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The functions used, each a pointer taken from the library with dlsym by ovw_init. The
// header's declarations give their types; nothing calls the declared symbols themselves.
#define OV_FUNCS(X)                                                                              \
  X(ov_get_last_err_msg) X(ov_get_error_info) X(ov_get_openvino_version) X(ov_version_free)     \
  X(ov_core_create) X(ov_core_read_model) X(ov_core_compile_model) X(ov_free)                    \
  X(ov_model_free) X(ov_model_inputs_size) X(ov_model_outputs_size)                              \
  X(ov_model_const_input_by_index) X(ov_model_const_output_by_index)                             \
  X(ov_model_reshape_by_port_indexes) X(ov_port_get_any_name) X(ov_port_get_partial_shape)      \
  X(ov_port_get_element_type) X(ov_output_const_port_free) X(ov_partial_shape_free)              \
  X(ov_partial_shape_create_dynamic) X(ov_compiled_model_free)                                   \
  X(ov_compiled_model_get_property) X(ov_compiled_model_create_infer_request)                    \
  X(ov_infer_request_free) X(ov_infer_request_set_input_tensor_by_index)                         \
  X(ov_infer_request_infer) X(ov_infer_request_cancel)                                           \
  X(ov_infer_request_get_output_tensor_by_index) X(ov_tensor_create_from_host_ptr)               \
  X(ov_tensor_free) X(ov_tensor_get_shape) X(ov_tensor_get_element_type) X(ov_tensor_data)       \
  X(ov_tensor_get_byte_size) X(ov_shape_create) X(ov_shape_free)

#define DECLARE(f) static __typeof__(&f) p_##f;
OV_FUNCS(DECLARE)

static ov_core_t *core;

// Returned when an error cannot be allocated: a NULL would read as success.
static char oom_msg[] = "out of memory";
static ovw_error oom_error = {1, oom_msg};

static ovw_error *new_error(int code, const char *msg) {
  ovw_error *e = malloc(sizeof *e);
  if (e == NULL) return &oom_error;
  e->code = code;
  e->msg = strdup(msg ? msg : "");
  if (e->msg == NULL) {
    free(e);
    return &oom_error;
  }
  return e;
}

// The error of a failed call: OpenVINO's message for this thread (owned by the library), or
// the status's description where there is none. NULL for OK.
static ovw_error *fail(ov_status_e st) {
  if (st == OK) return NULL;
  const char *m = p_ov_get_last_err_msg ? p_ov_get_last_err_msg() : NULL;
  if (m == NULL || *m == 0) m = p_ov_get_error_info ? p_ov_get_error_info(st) : "unknown error";
  return new_error((int)st, m);
}

static ovw_error *oom(void) { return new_error(1, "out of memory"); }

void ovw_error_free(ovw_error *e) {
  if (e == NULL || e == &oom_error) return;
  free(e->msg);
  free(e);
}

ovw_error *ovw_init(const char *path) {
  if (core != NULL) return NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *m = dlerror();
    return new_error(1, m ? m : "dlopen failed");
  }
#define LOAD(f)                                                                 \
  p_##f = (__typeof__(&f))dlsym(h, #f);                                         \
  if (p_##f == NULL) {                                                          \
    dlclose(h);                                                                 \
    return new_error(1, "the library has no " #f ": not OpenVINO's C API 2024 or newer"); \
  }
  OV_FUNCS(LOAD)
#undef LOAD
  ovw_error *e = fail(p_ov_core_create(&core));
  if (e != NULL) {
    core = NULL;
    dlclose(h);
  }
  return e;  // on success the handle stays open for the process's life
}

char *ovw_version(void) {
  ov_version_t v;
  if (core == NULL || p_ov_get_openvino_version(&v) != OK) return NULL;
  char *s = strdup(v.buildNumber ? v.buildNumber : "");
  p_ov_version_free(&v);
  return s;
}

void ovw_io_free(ovw_io *info) {
  free(info->name);
  free(info->dims);
  memset(info, 0, sizeof *info);
}

ovw_error *ovw_read_model(const char *xml, const char *bin, ov_model_t **out) {
  *out = NULL;
  return fail(p_ov_core_read_model(core, xml, bin, out));
}

void ovw_model_free(ov_model_t *m) {
  if (m != NULL) p_ov_model_free(m);
}

ovw_error *ovw_model_io_count(const ov_model_t *m, int output, size_t *n) {
  return fail(output ? p_ov_model_outputs_size(m, n) : p_ov_model_inputs_size(m, n));
}

ovw_error *ovw_model_io(const ov_model_t *m, int output, size_t index, ovw_io *info) {
  memset(info, 0, sizeof *info);
  ov_output_const_port_t *port = NULL;
  ov_status_e st = output ? p_ov_model_const_output_by_index(m, index, &port)
                          : p_ov_model_const_input_by_index(m, index, &port);
  if (st != OK) return fail(st);
  char *name = NULL;
  // A port without a tensor name is an error here, not an empty name.
  if (p_ov_port_get_any_name(port, &name) == OK && name != NULL) {
    info->name = strdup(name);
    p_ov_free(name);
  } else {
    info->name = strdup("");
  }
  ovw_error *e = NULL;
  ov_element_type_e t = DYNAMIC;
  ov_partial_shape_t ps;
  memset(&ps, 0, sizeof ps);
  if (info->name == NULL) e = oom();
  if (e == NULL) e = fail(p_ov_port_get_element_type(port, &t));
  info->elem = (int)t;
  if (e == NULL) e = fail(p_ov_port_get_partial_shape(port, &ps));
  if (e == NULL) {
    if (ps.rank.min != ps.rank.max || ps.rank.min < 0) {
      info->rank = -1;
    } else {
      info->rank = ps.rank.min;
      info->dims = calloc(info->rank ? info->rank : 1, sizeof(int64_t));
      if (info->dims == NULL) e = oom();
      for (int64_t i = 0; e == NULL && i < info->rank; i++)
        info->dims[i] = ps.dims[i].min == ps.dims[i].max ? ps.dims[i].min : -1;
    }
    p_ov_partial_shape_free(&ps);
  }
  p_ov_output_const_port_free(port);
  return e;
}

ovw_error *ovw_model_batch(const ov_model_t *m, int64_t lo, int64_t hi) {
  size_t n = 0;
  ovw_error *e = ovw_model_io_count(m, 0, &n);
  if (e != NULL || n == 0) return e;
  size_t *idx = calloc(n, sizeof *idx);
  ov_partial_shape_t *shapes = calloc(n, sizeof *shapes);
  size_t k = 0;
  if (idx == NULL || shapes == NULL) e = oom();
  for (size_t i = 0; e == NULL && i < n; i++) {
    ovw_io io;
    e = ovw_model_io(m, 0, i, &io);
    if (e == NULL && io.rank >= 1) {
      ov_dimension_t *dims = calloc(io.rank, sizeof *dims);
      if (dims == NULL) {
        e = oom();
      } else {
        dims[0].min = lo, dims[0].max = hi;
        for (int64_t d = 1; d < io.rank; d++)
          dims[d].min = io.dims[d] < 0 ? -1 : io.dims[d], dims[d].max = io.dims[d];
        ov_rank_t rank = {io.rank, io.rank};
        e = fail(p_ov_partial_shape_create_dynamic(rank, dims, &shapes[k]));
        if (e == NULL) idx[k++] = i;
        free(dims);
      }
    }
    ovw_io_free(&io);
  }
  if (e == NULL && k > 0) e = fail(p_ov_model_reshape_by_port_indexes(m, idx, shapes, k));
  for (size_t i = 0; i < k; i++) p_ov_partial_shape_free(&shapes[i]);
  free(shapes);
  free(idx);
  return e;
}

ovw_error *ovw_compile(const ov_model_t *m, const ovw_options *o, ov_compiled_model_t **out) {
  // ov_core_compile_model takes its properties as variadic key, value pairs: the set ones
  // go first, and property_args_size says how many of the ten are read.
  const char *kv[10] = {0};
  size_t n = 0;
  if (o->precision) kv[n++] = "INFERENCE_PRECISION_HINT", kv[n++] = o->precision;
  if (o->hint) kv[n++] = "PERFORMANCE_HINT", kv[n++] = o->hint;
  if (o->streams) kv[n++] = "NUM_STREAMS", kv[n++] = o->streams;
  if (o->threads) kv[n++] = "INFERENCE_NUM_THREADS", kv[n++] = o->threads;
  if (o->pinning) kv[n++] = "ENABLE_CPU_PINNING", kv[n++] = o->pinning;
  *out = NULL;
  return fail(p_ov_core_compile_model(core, m, "CPU", n, out, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5],
                                      kv[6], kv[7], kv[8], kv[9]));
}

void ovw_compiled_free(ov_compiled_model_t *c) {
  if (c != NULL) p_ov_compiled_model_free(c);
}

ovw_error *ovw_compiled_property(const ov_compiled_model_t *c, const char *key, char **value) {
  char *v = NULL;
  *value = NULL;
  ovw_error *e = fail(p_ov_compiled_model_get_property(c, key, &v));
  if (e != NULL) return e;
  *value = strdup(v ? v : "");
  if (v != NULL) p_ov_free(v);
  return *value ? NULL : oom();
}

ovw_error *ovw_request_new(const ov_compiled_model_t *c, ov_infer_request_t **out) {
  *out = NULL;
  return fail(p_ov_compiled_model_create_infer_request(c, out));
}

void ovw_request_free(ov_infer_request_t *r) {
  if (r != NULL) p_ov_infer_request_free(r);
}

ovw_error *ovw_infer(ov_infer_request_t *r, const ovw_input *ins, size_t nin) {
  ovw_error *e = NULL;
  for (size_t i = 0; e == NULL && i < nin; i++) {
    ov_shape_t shape;
    ov_tensor_t *t = NULL;
    e = fail(p_ov_shape_create((int64_t)ins[i].ndims, ins[i].shape, &shape));
    if (e != NULL) break;
    static char empty[8];  // a tensor of no elements still needs a pointer
    e = fail(p_ov_tensor_create_from_host_ptr((ov_element_type_e)ins[i].elem, shape,
                                              ins[i].data ? ins[i].data : empty, &t));
    p_ov_shape_free(&shape);
    // The request holds the tensor (a shared reference) until the next set; freeing ours
    // here leaves it the request's, over the caller's buffer, which outlives the infer.
    if (e == NULL) e = fail(p_ov_infer_request_set_input_tensor_by_index(r, i, t));
    if (t != NULL) p_ov_tensor_free(t);
  }
  if (e == NULL) e = fail(p_ov_infer_request_infer(r));
  return e;
}

void ovw_cancel(ov_infer_request_t *r) { p_ov_infer_request_cancel(r); }

ovw_error *ovw_output(ov_infer_request_t *r, size_t index, int *elem, size_t *ndims, int64_t *dims,
                      size_t cap, void **data, size_t *nbytes) {
  ov_tensor_t *t = NULL;
  ovw_error *e = fail(p_ov_infer_request_get_output_tensor_by_index(r, index, &t));
  if (e != NULL) return e;
  ov_element_type_e et = DYNAMIC;
  ov_shape_t shape;
  memset(&shape, 0, sizeof shape);
  e = fail(p_ov_tensor_get_element_type(t, &et));
  if (e == NULL) e = fail(p_ov_tensor_get_shape(t, &shape));
  if (e == NULL) {
    *ndims = (size_t)shape.rank;
    for (int64_t i = 0; i < shape.rank && (size_t)i < cap; i++) dims[i] = shape.dims[i];
    p_ov_shape_free(&shape);
  }
  if (e == NULL) e = fail(p_ov_tensor_get_byte_size(t, nbytes));
  if (e == NULL) e = fail(p_ov_tensor_data(t, data));
  *elem = (int)et;
  // The request keeps its output tensor and buffer; this frees our handle only.
  p_ov_tensor_free(t);
  return e;
}
