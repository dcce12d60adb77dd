// internal.h is what the parts of torchd.h's implementation share: the objects behind its
// opaque handles, the exception guard, and each concern's entry points. It is not part of
// the C ABI; only torch/capi/*.cc include it.
//
// The parts, one concern each: torchd.cc (modules, and what the library reports), values.cc
// with values.h (input trees to IValues and back, tensors, results), isa.cc (a package's CPU
// features against this host's), bf16.cc (autocast and float32 islands), packages.cc
// (AOTInductor packages), memory.cc (threads and the C allocator), explain.cc (Integrated
// Gradients).

#ifndef TORCHD_CAPI_INTERNAL_H
#define TORCHD_CAPI_INTERNAL_H

#include "torchd.h"

#include <ATen/autocast_mode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct td_module {
  torch::jit::Module module;
  c10::Device device = c10::Device(c10::kCPU);
  bool bf16 = false;  // TD_LOAD_BF16
};

// td_package owns one AOTInductor package loader; its runner holds num_runners model
// instances that share the package's weights.
struct td_package {
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  c10::Device device = c10::Device(c10::kCPU);
  std::map<std::string, std::string> metadata;
};

struct td_tensor {
  at::Tensor t;
};

// td_result owns the flattened output tree and what its nodes point to. deque keeps
// element addresses stable while it grows.
struct td_result {
  std::vector<td_node> nodes;
  std::deque<std::string> strings;
  std::deque<std::vector<int64_t>> shapes;
};

namespace td {

// dup copies s into memory the caller frees with std::free (td_error_free).
inline char *dup(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p != nullptr) {
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
  }
  return p;
}

// guard runs f and turns any exception into a td_error. c10::Error's what() carries a
// C++ backtrace that means nothing to a client, so the short message is used.
template <typename F>
td_error guard(F &&f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error &e) {
    return dup(e.what_without_backtrace());
  } catch (const std::exception &e) {
    return dup(e.what());
  } catch (...) {
    return dup("unknown C++ exception");
  }
}

// to_scalar_type and from_scalar_type map the TD_* dtype codes to LibTorch's (values.cc).
c10::ScalarType to_scalar_type(int32_t dt);
int32_t from_scalar_type(c10::ScalarType st);

// free_result_tensors frees the tensors of a result whose call failed (values.cc).
void free_result_tensors(td_result *r);

// OnWorkerStream makes the calling thread's own stream from the device's pool current for one
// call on a GPU, so that a worker's copies and forward neither queue behind nor wait for other
// workers' work on the shared default stream. Each worker calls from its own locked OS thread.
struct OnWorkerStream {
  std::optional<c10::StreamGuard> guard;
  explicit OnWorkerStream(c10::Device d) {
    if (d.is_cpu()) return;
    thread_local std::vector<c10::Stream> streams;
    for (const auto &s : streams) {
      if (s.device() == d) {
        guard.emplace(s);
        return;
      }
    }
    streams.push_back(c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d));
    guard.emplace(streams.back());
  }
};

// note_arena leaves this thread's probe block for td_trim_arenas (memory.cc); every entry
// point that may allocate in LibTorch calls it first.
void note_arena();

// owns_count says the calling thread set its own count: a worker's thread, whose forwards go
// to its forward thread (offload.cc).
extern thread_local bool owns_count;

// check_cpu refuses a package compiled for CPU features this host lacks (isa.cc).
void check_cpu(const std::map<std::string, std::string> &md);

// Autocast turns autocast to dtype on for device on this thread (autocast state is
// thread-local) until it goes out of scope, and then restores what was there.
class Autocast {
 public:
  Autocast(c10::DeviceType device, at::ScalarType dtype)
      : device_(device),
        enabled_(at::autocast::is_autocast_enabled(device)),
        dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    // The cache holds the weights' casts for the length of one call.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, enabled_);
    at::autocast::set_autocast_dtype(device_, dtype_);
  }
  Autocast(const Autocast &) = delete;
  Autocast &operator=(const Autocast &) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType dtype_;
};

// reset_fp32_islands forgets an island a call that threw left begun; wrap_fp32_calls keeps
// the named submodules of a bfloat16 module in float32; float32_outputs casts a bfloat16
// module's outputs back (bf16.cc).
void reset_fp32_islands();
void wrap_fp32_calls(torch::jit::Module &top, torch::jit::Module &mod, const std::string &prefix,
                     torch::jit::Graph &graph, std::set<std::string> &names);
c10::IValue float32_outputs(const c10::IValue &v);

}  // namespace td

#endif  // TORCHD_CAPI_INTERNAL_H
