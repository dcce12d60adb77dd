// torchd.cc implements torchd.h's TorchScript modules over LibTorch's runtime, and what the
// library reports of itself. The other concerns have a file each (internal.h lists them).
//
// Every exported function catches every exception: a C++ exception that unwinds into Go
// aborts the process, so the boundary is where each one becomes a td_error.

#include "values.h"

#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/passes/autocast.h>
#include <torch/version.h>

#include <sstream>

using namespace td;

extern "C" {

td_error td_module_load(const char *path, const char *device, int flags, const char *fp32_modules,
                        td_module **out) {
  note_arena();
  *out = nullptr;
  return guard([&] {
    c10::Device dev(device == nullptr || *device == '\0' ? "cpu" : device);
    if (dev.is_cuda()) {
      if (!at::hasCUDA()) {
        throw std::runtime_error(std::string("device ") + device +
                                 ": CUDA is not available in this LibTorch build or on this machine");
      }
      if (dev.has_index() && dev.index() >= static_cast<int>(at::getNumGPUs())) {
        throw std::runtime_error(std::string("device ") + device + ": only " +
                                 std::to_string(at::getNumGPUs()) + " CUDA device(s) present");
      }
      if (!dev.has_index()) dev = c10::Device(c10::kCUDA, 0);
    } else if (!dev.is_cpu()) {
      throw std::runtime_error(std::string("device ") + device + ": only cpu and cuda are supported");
    }
    auto m = std::make_unique<td_module>();
    m->device = dev;
    m->module = torch::jit::load(path, dev);
    m->module.eval();
    // Autocast is the dispatcher's alone: the JIT's own autocast pass would bake casts into
    // the graph at its first run, which a float32 island's turning autocast off cannot undo.
    torch::jit::setAutocastMode(false);
    if (fp32_modules != nullptr && *fp32_modules != '\0') {
      if (!(flags & TD_LOAD_BF16)) throw std::invalid_argument("float32 modules are for bfloat16 (TD_LOAD_BF16)");
      std::set<std::string> names;
      std::istringstream in(fp32_modules);
      for (std::string name; std::getline(in, name, ',');) names.insert(name);
      auto graph = m->module.get_method("forward").graph();
      wrap_fp32_calls(m->module, m->module, "", *graph, names);
      if (!names.empty()) {
        throw std::invalid_argument("float32 module " + *names.begin() +
                                    ": forward calls no submodule of that name");
      }
    }
    if (flags & (TD_LOAD_FREEZE | TD_LOAD_OPTIMIZE)) {
      // freeze keeps only forward unless told otherwise; keep every method.
      std::vector<std::string> keep;
      for (const auto &meth : m->module.get_methods()) {
        if (meth.name() != "forward") keep.push_back(meth.name());
      }
      m->module = torch::jit::freeze(m->module, keep);
      if (flags & TD_LOAD_OPTIMIZE) m->module = torch::jit::optimize_for_inference(m->module, keep);
    }
    m->bf16 = (flags & TD_LOAD_BF16) != 0;
    *out = m.release();
  });
}

void td_module_free(td_module *m) { delete m; }

td_error td_module_run(td_module *m, const char *method, const td_node *nodes, int n_nodes,
                       td_result **out) {
  note_arena();
  *out = nullptr;
  auto r = std::make_unique<td_result>();
  td_error err = guard([&] {
    // InferenceMode is thread-local, so it is set here, on the calling thread, every call.
    c10::InferenceMode guard_mode;
    std::string name = method == nullptr || *method == '\0' ? "forward" : method;
    auto fn = m->module.find_method(name);
    if (!fn) throw std::invalid_argument("model has no method '" + name + "'");
    OnWorkerStream on_stream(m->device);
    Builder b{nodes, n_nodes, 0, m->device};
    std::vector<c10::IValue> args;
    while (b.pos < n_nodes) args.push_back(b.value());
    c10::IValue res;
    if (m->bf16) {
      reset_fp32_islands();  // a call that threw inside an island left it begun
      Autocast ac(m->device.type(), at::kBFloat16);
      res = float32_outputs((*fn)(std::move(args)));
    } else {
      res = (*fn)(std::move(args));
    }
    b.finish();
    Flattener{r.get(), b.borrowed}.value(res);
  });
  if (err != nullptr) {
    free_result_tensors(r.get());
    return err;
  }
  *out = r.release();
  return nullptr;
}

td_error td_module_schema(td_module *m, const char *method, char **out) {
  *out = nullptr;
  return guard([&] {
    auto fn = m->module.find_method(method);
    if (!fn) throw std::invalid_argument(std::string("model has no method '") + method + "'");
    std::ostringstream os;
    os << fn->function().getSchema();
    *out = dup(os.str());
  });
}

char *td_module_device(td_module *m) { return dup(m->device.str()); }

int td_cuda_is_available(void) {
  try {
    return at::hasCUDA() && at::getNumGPUs() > 0 ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int td_cuda_device_count(void) {
  try {
    return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0;
  } catch (...) {
    return 0;
  }
}

#define TD_STR2(x) #x
#define TD_STR(x) TD_STR2(x)
const char *td_version(void) {
  return TD_STR(TORCH_VERSION_MAJOR) "." TD_STR(TORCH_VERSION_MINOR) "." TD_STR(TORCH_VERSION_PATCH);
}

void td_error_free(char *e) { std::free(e); }

}  // extern "C"
