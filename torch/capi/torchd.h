/*
 * torchd.h: the C ABI of libtorchd_c, a small library over LibTorch's TorchScript runtime
 * and its AOTInductor package loader (.pt2 files made by torch._inductor.aoti_compile_and_package).
 *
 * The Go package github.com/torchd/torchd/torch links only this ABI, so the same Go binary
 * runs on a CPU or a CUDA build of the library, chosen by the library path at run time.
 *
 * Conventions
 *   - Every function that can fail returns a td_error: NULL on success, otherwise a
 *     malloc'd NUL-terminated message that the caller frees with td_error_free.
 *     No C++ exception ever crosses this boundary.
 *   - Handles (td_module*, td_package*, td_tensor*, td_result*) are owned by the caller and freed with
 *     their *_free function. Freeing NULL is a no-op.
 *   - Pointers passed *in* are borrowed for the duration of the call only, except the data
 *     pointers of input tensors, see td_module_run.
 */
#ifndef TORCHD_H
#define TORCHD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef char *td_error;
typedef struct td_module td_module;
typedef struct td_package td_package;
typedef struct td_tensor td_tensor;
typedef struct td_result td_result;

/* Value kinds of a td_node. */
enum {
  TD_NONE = 0,
  TD_BOOL = 1,
  TD_INT = 2,
  TD_DOUBLE = 3,
  TD_STRING = 4,
  TD_TENSOR = 5,
  TD_TUPLE = 6,
  TD_LIST = 7,
  TD_DICT = 8,
};

/* Element types; the values are the project's own, not c10::ScalarType's. */
enum {
  TD_FLOAT32 = 1,
  TD_FLOAT16 = 2,
  TD_BFLOAT16 = 3,
  TD_FLOAT64 = 4,
  TD_INT64 = 5,
  TD_INT32 = 6,
  TD_UINT8 = 7,
  TD_INT8 = 8,
  TD_BOOLT = 9,
};

/* Flags for td_module_load. */
enum {
  TD_LOAD_FREEZE = 1,   /* torch::jit::freeze after eval() */
  TD_LOAD_OPTIMIZE = 2, /* torch::jit::optimize_for_inference (implies freeze) */
  /* Run every method under autocast to bfloat16 on the module's device: matrix products and
   * convolutions in bfloat16, the ops autocast keeps in float32 in float32. Floating outputs
   * come back as float32, so callers see the same dtypes as without it. */
  TD_LOAD_BF16 = 4,
};

/*
 * td_node is one value of a tree flattened in pre-order: a container (tuple, list, dict)
 * is followed by its n_children children (a dict's children alternate key, value).
 * The same layout carries inputs into td_module_run and outputs out of td_result_nodes.
 */
typedef struct td_node {
  int32_t kind;       /* TD_NONE .. TD_DICT */
  int32_t n_children; /* tuple/list: items; dict: 2 x pairs */
  int64_t i;          /* TD_BOOL (0/1) and TD_INT */
  double d;           /* TD_DOUBLE */
  const char *str;    /* TD_STRING: bytes, not NUL-terminated */
  int64_t str_len;
  /* TD_TENSOR. On input either tensor (a native handle, borrowed) or data is set.
   * On output tensor is a new handle owned by the caller, and data points at its
   * contiguous CPU elements (NULL when the tensor lives on another device). */
  td_tensor *tensor;
  void *data;
  int32_t dtype;
  int32_t ndim;
  const int64_t *shape;
} td_node;

/* Wraps torch::jit::load on device ("cpu", "cuda", "cuda:N"), then eval() and the
 * TD_LOAD_* flags. fp32_modules (NULL or "" for none; with TD_LOAD_BF16 only) is a
 * comma-separated list of submodules, dotted paths as named_modules gives them, that stay
 * float32: each call of one that forward makes runs with autocast off, its tensor input cast
 * to float32 and its output back to the input's dtype. Each must take one tensor first and
 * return one tensor. On success *out is a new module. */
td_error td_module_load(const char *path, const char *device, int flags, const char *fp32_modules,
                        td_module **out);

/* Frees a module. It must not be running. */
void td_module_free(td_module *m);

/* Runs method ("forward" or any other method) on the arguments in nodes[0..n_nodes):
 * each top-level node is one positional argument. Runs under c10::InferenceMode.
 *
 * Input tensors given by data are wrapped with torch::from_blob without copying; the
 * caller keeps that memory alive and unmoved (pinned) until the call returns. CPU inputs
 * are moved to the module's device. An output that shares storage with such an input is
 * cloned, so a result never points into caller memory.
 * On success *out is a new result. */
td_error td_module_run(td_module *m, const char *method, const td_node *nodes, int n_nodes,
                       td_result **out);

/* Returns in *out the schema of method as a malloc'd string, e.g.
 * "forward(__torch__.Net self, Tensor x) -> Tensor". Free with td_error_free. */
td_error td_module_schema(td_module *m, const char *method, char **out);

/* Returns the module's device as a malloc'd string ("cpu", "cuda:0"). */
char *td_module_device(td_module *m);

/*
 * AOTInductor packages (.pt2). A package holds compiled code for one device and CPU
 * capability, and one model per name ("model" unless the package was made with others).
 *
 * Concurrency: a package loaded with num_runners = N runs up to N td_package_run calls at
 * once, each on its own model instance (its own activation buffers); the instances share the
 * weights. A call beyond N waits inside LibTorch until an instance is free. So a worker pool
 * of N workers loads one package with num_runners = N.
 *
 * The compiled code checks the number of inputs but neither their shapes nor dtypes (AOTInductor
 * checks those only under AOTI_RUNTIME_CHECK_INPUTS, with bounds of its own): the caller checks
 * every input against the package's specs before td_package_run (torch/package.go does).
 */

/* Wraps AOTIModelPackageLoader for model (NULL or "": "model") on device ("cpu", "cuda:N").
 * The caller has checked the package file and extracted it into dir (and removes dir after
 * td_package_free). A LibTorch from 2.15 on loads dir in place, extracting and removing
 * nothing; an older one (whose loader takes only a zip) loads package, the checked .pt2,
 * which it extracts into a directory of its own. metadata is the model's metadata as
 * "key\tvalue\n" lines. Refuses, before loading the package's library, a package compiled
 * for another device kind or for CPU features this host lacks. On success *out is a new
 * package. */
td_error td_package_load(const char *dir, const char *package, const char *model, const char *device,
                         const char *metadata, int num_runners, td_package **out);

/* Frees a package. It must not be running. */
void td_package_free(td_package *p);

/* Runs the package on the tensors in nodes[0..n_nodes), each top-level node one TD_TENSOR
 * input, under c10::InferenceMode; inputs are borrowed as in td_module_run. *out is a new
 * result: one TD_TENSOR node for a single output, else a TD_TUPLE of them. */
td_error td_package_run(td_package *p, const td_node *nodes, int n_nodes, td_result **out);

/* Returns the package's pytree input and output specs (JSON) as malloc'd strings; free each
 * with td_error_free. */
td_error td_package_call_spec(td_package *p, char **in_spec, char **out_spec);

/* Returns the package's device as a malloc'd string ("cpu", "cuda:0"). */
char *td_package_device(td_package *p);

/* The flattened output of td_module_run and td_package_run: n nodes in pre-order. The nodes and the strings
 * and shapes they point to live until td_result_free. Tensor handles in the nodes are
 * owned by the caller and outlive the result. */
const td_node *td_result_nodes(td_result *r, int *n);
void td_result_free(td_result *r);

/* Frees a tensor handle. */
void td_tensor_free(td_tensor *t);

/* Copies t to the CPU as a contiguous tensor: *out is a new handle and *data points at its
 * elements. */
td_error td_tensor_to_cpu(td_tensor *t, td_tensor **out, void **data);

/* Allocates nbytes of CPU memory to stage a batch's inputs in, held by a uint8 tensor (*out,
 * freed with td_tensor_free; *data points at its first byte). With pin set and a CUDA device
 * present, the memory is page-locked (pinned), so that an input given by data from it crosses to
 * the device asynchronously (td_module_run and td_package_run wait for that copy before they
 * return, so the memory may be rewritten afterwards); without a CUDA device, or on a CPU build,
 * it is ordinary memory and that is no error. *pinned says which it is. */
td_error td_host_buffer(int64_t nbytes, int pin, td_tensor **out, void **data, int *pinned);

/* Intra-op and inter-op thread pools. Inter-op can be set once, before any parallel work. */
void td_set_num_threads(int n);
int td_get_num_threads(void);
/* Sets the intra-op threads of the calling thread's parallel regions only (its OpenMP
 * nthreads-var, and MKL's thread-local count), leaving the process default, other threads and
 * shared caches alone: cheap enough to call before every forward. Returns the count LibTorch
 * now reports on this thread (at::get_num_threads), or 0 when n < 1. */
int td_set_num_threads_here(int n);
td_error td_set_num_interop_threads(int n);

/* Makes the C allocator that LibTorch's CPU tensors come from keep the memory they free
 * (glibc: no mmap'd blocks, no trimming of the heaps), so the next forward reuses those pages
 * instead of faulting in fresh zeroed ones. Process-wide; call it before the first forward.
 * Returns 1 when it was applied, 0 where the C library is not glibc. */
int td_keep_freed_memory(void);

/* Gives back the free tops of the arenas of every thread that has called into this library
 * since the last call (those threads' arenas stay noted after they exit), which malloc_trim
 * leaves alone; malloc_trim(0) still gives back the rest. Does nothing unless
 * td_keep_freed_memory was applied. Returns the number of arenas' probes freed. */
int td_trim_arenas(void);

/* CUDA availability of the LibTorch this library was built against. */
int td_cuda_is_available(void);
int td_cuda_device_count(void);

/* The LibTorch version, e.g. "2.15.0". Static; do not free. */
const char *td_version(void);

/* Frees an error or a string returned by this library. */
void td_error_free(char *e);

/* ---- Explanations: Integrated Gradients ---------------------------------------------- */

/* Integrated Gradients of method's output[:, target] with respect to its argument arg, as
 * Captum's IntegratedGradients computes them: the sum over i < n_steps of
 * weights[i] * d output[:, target] / d x at x = baseline + alphas[i] * (input - baseline),
 * times (input - baseline). nodes are method's arguments as for td_module_run, followed by
 * one more top-level node, the baseline, of the input's shape. The n_steps scaled inputs run
 * as one batch of n_steps * B rows (B: the input's leading dimension), step by step, and
 * every other tensor argument is repeated n_steps times along its leading dimension, as
 * Captum does. method must return [n_steps * B, classes] logits (or a tuple whose first item
 * is). Runs with autograd on, not under InferenceMode. On success *out is a new result of one
 * tensor: the attributions, float32, of the input's shape. */
td_error td_module_integrated_gradients(td_module *m, const char *method, const td_node *nodes,
                                        int n_nodes, int arg, const double *alphas,
                                        const double *weights, int n_steps, int64_t target,
                                        td_result **out);

/*
 * Forward threads. td_module_start and td_package_start begin td_module_run and
 * td_package_run and return at once; when the run is over, 1 is written to the eventfd efd,
 * and td_call_finish then returns the run's error and result and frees the call, with in
 * *ran_with the count a forward thread ran it with (0 if the calling thread ran it). The inputs
 * stay borrowed until efd is written. The run goes to the calling thread's forward thread
 * if the calling thread owns its count (it called td_set_num_threads_here), with that count;
 * otherwise, or while that thread is busy, it runs on the calling thread before the return.
 * NULL means no memory for the call: nothing ran and nothing is written.
 */
typedef struct td_call td_call;
td_call *td_module_start(td_module *m, const char *method, const td_node *nodes, int n_nodes, int efd);
td_call *td_package_start(td_package *p, const td_node *nodes, int n_nodes, int efd);
td_error td_call_finish(td_call *c, td_result **out, int *ran_with);

#ifdef __cplusplus
}
#endif

#endif /* TORCHD_H */
