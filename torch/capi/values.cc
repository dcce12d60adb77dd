// values.cc: dtype codes, results and tensors (see values.h for the input and output trees).

#include "values.h"

#include <ATen/Context.h>

namespace td {

namespace {
struct DTypeEntry {
  int32_t td;
  c10::ScalarType st;
};

const DTypeEntry kDTypes[] = {
    {TD_FLOAT32, c10::kFloat},   {TD_FLOAT16, c10::kHalf},  {TD_BFLOAT16, c10::kBFloat16},
    {TD_FLOAT64, c10::kDouble},  {TD_INT64, c10::kLong},    {TD_INT32, c10::kInt},
    {TD_UINT8, c10::kByte},      {TD_INT8, c10::kChar},     {TD_BOOLT, c10::kBool},
};

}  // namespace

c10::ScalarType to_scalar_type(int32_t dt) {
  for (const auto &e : kDTypes) {
    if (e.td == dt) return e.st;
  }
  throw std::invalid_argument("unsupported input dtype code " + std::to_string(dt));
}

int32_t from_scalar_type(c10::ScalarType st) {
  for (const auto &e : kDTypes) {
    if (e.st == st) return e.td;
  }
  throw std::invalid_argument(std::string("unsupported output dtype ") + c10::toString(st));
}

void free_result_tensors(td_result *r) {
  for (auto &nd : r->nodes) {
    if (nd.kind == TD_TENSOR) delete nd.tensor;
  }
}

}  // namespace td

using namespace td;

extern "C" {

const td_node *td_result_nodes(td_result *r, int *n) {
  *n = static_cast<int>(r->nodes.size());
  return r->nodes.data();
}

void td_result_free(td_result *r) { delete r; }

void td_tensor_free(td_tensor *t) { delete t; }

td_error td_host_buffer(int64_t nbytes, int pin, td_tensor **out, void **data, int *pinned) {
  note_arena();
  *out = nullptr;
  *data = nullptr;
  *pinned = 0;
  return guard([&] {
    if (nbytes < 0) throw std::invalid_argument("host buffer of negative size " + std::to_string(nbytes));
    // Pinned memory comes from the CUDA hooks, which a CPU build or a machine with no GPU
    // lacks: there the buffer is ordinary memory.
    bool want = pin != 0 && at::hasCUDA() && at::getNumGPUs() > 0;
    at::Tensor t = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(want));
    *data = t.data_ptr();
    *pinned = want ? 1 : 0;
    *out = new td_tensor{std::move(t)};
  });
}

td_error td_tensor_to_cpu(td_tensor *t, td_tensor **out, void **data) {
  note_arena();
  *out = nullptr;
  *data = nullptr;
  return guard([&] {
    at::Tensor c = t->t.to(c10::kCPU).contiguous();
    *data = c.data_ptr();
    *out = new td_tensor{std::move(c)};
  });
}

}  // extern "C"
