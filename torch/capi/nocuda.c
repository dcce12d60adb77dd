/*
 * nocuda.c: the three CUDA entry points of LibTorch's stable C ABI that torchvision's operator
 * library calls from its CUDA kernels, for a CPU build of libtorchd_c, which loads no
 * libtorch_cuda (third_party/get-torchvision.sh removes that dependency from the CPU copy).
 *
 * They are never reached: a CUDA kernel is dispatched only for a CUDA tensor, which a CPU build
 * cannot make. Defining them lets the library resolve every symbol at load, whatever the
 * binding mode (LD_BIND_NOW), and fail with a message should one be called. A CUDA build does
 * not compile this file: there libtorch_cuda defines them.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AOTI_TORCH_FAILURE 1

static const char no_cuda[] = "torchd: this build has no CUDA (build with TORCH_CUDA=1)";

int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void **ret_stream) {
  (void)device_index;
  if (ret_stream) *ret_stream = NULL;
  return AOTI_TORCH_FAILURE;
}

int32_t torch_c10_cuda_check_msg(int32_t err, const char *filename, const char *function_name,
                                 uint32_t line_number, bool include_device_assertions,
                                 char **error_msg) {
  (void)err, (void)filename, (void)function_name, (void)line_number, (void)include_device_assertions;
  if (error_msg) *error_msg = strdup(no_cuda);
  return AOTI_TORCH_FAILURE;
}

void torch_c10_cuda_free_error_msg(char *error_msg) { free(error_msg); }
