// packages.cc: AOTInductor packages (.pt2), loaded against torchd's own LibTorch.

#include "values.h"

#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <mutex>
#include <sstream>

namespace td {

namespace {

// own_dir is the directory this library was loaded from.
std::string own_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&td_package_load), &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("cannot find where libtorchd_c.so was loaded from");
  }
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// loaded_path returns the file of the loaded library whose name or SONAME is soname, or "".
std::string loaded_path(const char *soname) {
  void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return "";
  struct link_map *lm = nullptr;
  std::string path;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr) path = lm->l_name;
  dlclose(h);
  return path;
}

std::string real(const std::string &path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) == nullptr ? path : std::string(buf);
}

// bind_own_libtorch makes sure that a package's compiled library, whose NEEDED entries name
// libtorch.so, libtorch_cpu.so and libc10.so without a path, binds to the LibTorch this
// library runs on. The dynamic loader never searches for a SONAME that is already loaded, so
// each must be loaded now and be ours: libtorchd_c.so is linked with an RPATH (searched
// before LD_LIBRARY_PATH) and NEEDs the stand-in libtorch.so beside it. If the stand-in is not
// loaded it is loaded here by its absolute path; any other libtorch.so, or a libtorch_cpu.so
// other than the one this library calls into, refuses the package, which would otherwise run
// against another LibTorch (a SIGBUS) or pull in every CUDA library.
void bind_own_libtorch() {
  std::string dir = own_dir();
  std::string standin = loaded_path("libtorch.so");
  if (standin.empty()) {
    std::string path = dir + "/libtorch.so";
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char *e = dlerror();
      throw std::runtime_error("cannot load torchd's libtorch.so stand-in: " + std::string(e ? e : path));
    }
    standin = loaded_path("libtorch.so");
  }
  Dl_info info{};
  std::string cpu;
  if (dladdr(reinterpret_cast<void *>(&at::globalContext), &info) != 0 && info.dli_fname != nullptr) {
    cpu = real(info.dli_fname);
  }
  std::string loaded_cpu = loaded_path("libtorch_cpu.so");
  if (!cpu.empty() && !loaded_cpu.empty() && real(loaded_cpu) != cpu) {
    throw std::runtime_error("the loaded libtorch_cpu.so is " + loaded_cpu + ", not " + cpu +
                             ", the one torchd runs on; a package would bind to the wrong LibTorch");
  }
  // The stand-in links only libtorch_cpu and libc10 (a CUDA build loads libtorch_cuda itself);
  // the wheel's libtorch.so would pull in libtorch_cuda and every CUDA library.
  if (real(standin) != real(dir + "/libtorch.so")) {
    throw std::runtime_error("the loaded libtorch.so is " + standin + ", not torchd's stand-in " + dir +
                             "/libtorch.so; a package would bind to it (is LD_PRELOAD set?)");
  }
}

}  // namespace

}  // namespace td

using namespace td;

extern "C" {

// package_loads makes package loads take turns: LibTorch's package loader parses every
// package's JSON into one static object, so two at once corrupt it (a SIGSEGV, or one
// package's metadata read as another's). Runs do not parse it and go on in parallel.
std::mutex package_loads;

// LibTorch loads an extracted package in place from 2.15 on (checked there); 2.11, the GPU
// check's, takes only a zip (its loader answers "Failed to initialize zip archive").
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
constexpr bool kLoadsPackageDirs = true;
#else
constexpr bool kLoadsPackageDirs = false;
#endif

td_error td_package_load(const char *dir, const char *package, const char *model, const char *device,
                         const char *metadata, int num_runners, td_package **out) {
  note_arena();
  *out = nullptr;
  return guard([&] {
    std::string name = model == nullptr || *model == '\0' ? "model" : model;
    c10::Device dev(device == nullptr || *device == '\0' ? "cpu" : device);
    if (dev.is_cuda() && !at::hasCUDA()) {
      throw std::runtime_error(std::string("device ") + device +
                               ": CUDA is not available in this LibTorch build or on this machine");
    } else if (!dev.is_cpu() && !dev.is_cuda()) {
      throw std::runtime_error(std::string("device ") + device + ": only cpu and cuda are supported");
    }
    if (num_runners < 1) throw std::invalid_argument("num_runners must be at least 1");
    auto p = std::make_unique<td_package>();
    std::istringstream lines(metadata == nullptr ? "" : metadata);
    for (std::string line; std::getline(lines, line);) {
      auto tab = line.find('\t');
      if (tab != std::string::npos) p->metadata[line.substr(0, tab)] = line.substr(tab + 1);
    }
    std::string want = dev.is_cpu() ? "cpu" : "cuda";
    auto key = p->metadata.find("AOTI_DEVICE_KEY");
    if (key == p->metadata.end()) throw std::runtime_error("package has no AOTI_DEVICE_KEY metadata");
    if (key->second != want) {
      throw std::runtime_error("package was compiled for device " + key->second +
                               ", not for " + dev.str());
    }
    if (dev.is_cpu()) check_cpu(p->metadata);
    if (dev.is_cuda() && !dev.has_index()) dev = c10::Device(c10::kCUDA, 0);
    std::lock_guard<std::mutex> lock(package_loads);
    bind_own_libtorch();
    p->device = dev;
    p->loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        kLoadsPackageDirs ? dir : package, name, /*run_single_threaded=*/false, static_cast<size_t>(num_runners),
        dev.is_cuda() ? dev.index() : static_cast<c10::DeviceIndex>(-1));
    *out = p.release();
  });
}

void td_package_free(td_package *p) { delete p; }

td_error td_package_run(td_package *p, const td_node *nodes, int n_nodes, td_result **out) {
  note_arena();
  *out = nullptr;
  auto r = std::make_unique<td_result>();
  td_error err = guard([&] {
    c10::InferenceMode guard_mode;
    OnWorkerStream on_stream(p->device);
    Builder b{nodes, n_nodes, 0, p->device};
    std::vector<at::Tensor> inputs;
    while (b.pos < n_nodes) {
      c10::IValue v = b.value();
      if (!v.isTensor()) throw std::invalid_argument("a package takes tensors only, got " + v.type()->repr_str());
      // The compiled code indexes with the strides it was exported with: contiguous ones.
      inputs.push_back(v.toTensor().contiguous());
    }
    std::vector<at::Tensor> outs = p->loader->run(inputs);
    b.finish();
    Flattener f{r.get(), b.borrowed};
    if (outs.size() == 1) {
      f.value(c10::IValue(outs[0]));
    } else {
      td_node nd{};
      nd.kind = TD_TUPLE;
      nd.n_children = static_cast<int32_t>(outs.size());
      r->nodes.push_back(nd);
      for (auto &t : outs) f.tensor(t);
    }
  });
  if (err != nullptr) {
    free_result_tensors(r.get());
    return err;
  }
  *out = r.release();
  return nullptr;
}

td_error td_package_call_spec(td_package *p, char **in_spec, char **out_spec) {
  *in_spec = nullptr;
  *out_spec = nullptr;
  return guard([&] {
    auto spec = p->loader->get_call_spec();
    if (spec.size() != 2) throw std::runtime_error("package call spec has " + std::to_string(spec.size()) + " parts, not 2");
    *in_spec = dup(spec[0]);
    *out_spec = dup(spec[1]);
  });
}

char *td_package_device(td_package *p) { return dup(p->device.str()); }

}  // extern "C"
