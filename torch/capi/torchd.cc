// torchd.cc implements torchd.h over LibTorch's TorchScript runtime.
//
// Every exported function catches every exception: a C++ exception that unwinds into Go
// aborts the process, so the boundary is where each one becomes a td_error.

#include "torchd.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/passes/autocast.h>
#include <torch/script.h>
#include <torch/version.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
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

namespace {

char *dup(const std::string &s) {
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

struct DTypeEntry {
  int32_t td;
  c10::ScalarType st;
};

const DTypeEntry kDTypes[] = {
    {TD_FLOAT32, c10::kFloat},   {TD_FLOAT16, c10::kHalf},  {TD_BFLOAT16, c10::kBFloat16},
    {TD_FLOAT64, c10::kDouble},  {TD_INT64, c10::kLong},    {TD_INT32, c10::kInt},
    {TD_UINT8, c10::kByte},      {TD_INT8, c10::kChar},     {TD_BOOLT, c10::kBool},
};

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

void noop_deleter(void *) {}

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

// Span is the memory of one input tensor built over caller memory.
struct Span {
  const char *begin, *end;
};

// Builder turns the pre-order input nodes into IValues.
struct Builder {
  const td_node *nodes;
  int n;
  int pos = 0;
  c10::Device device;
  std::vector<Span> borrowed;

  const td_node &next() {
    if (pos >= n) throw std::invalid_argument("malformed input tree: ran out of nodes");
    return nodes[pos++];
  }

  at::Tensor tensor(const td_node &nd) {
    if (nd.tensor != nullptr) {
      return nd.tensor->t.device() == device ? nd.tensor->t : nd.tensor->t.to(device);
    }
    if (nd.ndim < 0 || (nd.ndim > 0 && nd.shape == nullptr)) {
      throw std::invalid_argument("malformed tensor input: bad shape");
    }
    std::vector<int64_t> shape(nd.shape, nd.shape + nd.ndim);
    auto opts = at::TensorOptions().dtype(to_scalar_type(nd.dtype)).device(c10::kCPU);
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    at::Tensor t;
    if (numel == 0 || nd.data == nullptr) {
      t = at::empty(shape, opts);
    } else {
      t = torch::from_blob(nd.data, shape, noop_deleter, opts);
      const char *p = static_cast<const char *>(nd.data);
      borrowed.push_back({p, p + t.nbytes()});
    }
    if (device.is_cpu()) return t;
    // From pinned memory (td_host_buffer) the copy is queued on the device's stream and the
    // call waits for it at its end (finish); from pageable memory it is synchronous.
    bool pinned = nd.data != nullptr && t.is_pinned();
    return t.to(device, /*non_blocking=*/pinned);
  }

  // finish waits, on a GPU, for the call's work on its worker stream: the input copies queued
  // from pinned memory, whose source the caller may overwrite once the call returns, and the
  // forward, whose outputs are read later from another stream.
  void finish() const {
    if (!device.is_cpu()) c10::impl::VirtualGuardImpl(device.type()).getStream(device).synchronize();
  }

  c10::IValue value() {
    const td_node &nd = next();
    switch (nd.kind) {
      case TD_NONE:
        return c10::IValue();
      case TD_BOOL:
        return c10::IValue(nd.i != 0);
      case TD_INT:
        return c10::IValue(nd.i);
      case TD_DOUBLE:
        return c10::IValue(nd.d);
      case TD_STRING:
        return c10::IValue(std::string(nd.str, static_cast<size_t>(nd.str_len)));
      case TD_TENSOR:
        return c10::IValue(tensor(nd));
      case TD_TUPLE: {
        std::vector<c10::IValue> items;
        items.reserve(nd.n_children);
        for (int k = 0; k < nd.n_children; k++) items.push_back(value());
        return c10::ivalue::Tuple::create(std::move(items));
      }
      case TD_LIST:
        return list(nd.n_children);
      case TD_DICT:
        return dict(nd.n_children);
    }
    throw std::invalid_argument("malformed input tree: unknown kind " + std::to_string(nd.kind));
  }

  // list builds a typed list: TorchScript checks List[T] arguments by their element type,
  // so a list of tensors must be a c10::List<Tensor>, not a generic one.
  c10::IValue list(int count) {
    std::vector<c10::IValue> items;
    items.reserve(count);
    for (int k = 0; k < count; k++) items.push_back(value());
    c10::TypePtr elem = items.empty() ? c10::TensorType::get() : unify(items);
    c10::impl::GenericList out(elem);
    out.reserve(items.size());
    for (auto &it : items) out.push_back(std::move(it));
    return c10::IValue(std::move(out));
  }

  c10::IValue dict(int count) {
    if (count % 2 != 0) throw std::invalid_argument("malformed input tree: odd dict children");
    std::vector<c10::IValue> keys, vals;
    for (int k = 0; k < count / 2; k++) {
      keys.push_back(value());
      vals.push_back(value());
    }
    c10::TypePtr kt = keys.empty() ? c10::StringType::get() : unify(keys);
    c10::TypePtr vt = vals.empty() ? c10::TensorType::get() : unify(vals);
    c10::impl::GenericDict out(kt, vt);
    for (size_t k = 0; k < keys.size(); k++) out.insert_or_assign(keys[k], vals[k]);
    return c10::IValue(std::move(out));
  }

  // unify finds the element type of a list or dict. A tensor's IValue type is refined with
  // its dtype and shape, but containers are invariant in TorchScript, so List[Tensor]
  // needs the plain Tensor type.
  static c10::TypePtr unify(const std::vector<c10::IValue> &items) {
    auto general = [](c10::TypePtr t) -> c10::TypePtr {
      return t->kind() == c10::TypeKind::TensorType ? c10::TensorType::get() : t;
    };
    c10::TypePtr t = general(items[0].type());
    for (size_t k = 1; k < items.size(); k++) {
      auto u = c10::unifyTypes(t, general(items[k].type()));
      if (!u) {
        throw std::invalid_argument("list or dict mixes element types " + t->repr_str() +
                                    " and " + items[k].type()->repr_str());
      }
      t = *u;
    }
    return t;
  }
};

// Flattener writes an output IValue into a td_result in pre-order.
struct Flattener {
  td_result *r;
  const std::vector<Span> &borrowed;

  bool aliases_input(const at::Tensor &t) const {
    if (!t.has_storage() || !t.device().is_cpu()) return false;
    const char *p = static_cast<const char *>(t.storage().data());
    for (const auto &s : borrowed) {
      if (p >= s.begin && p < s.end) return true;
    }
    return false;
  }

  void value(const c10::IValue &v) {
    td_node nd{};
    if (v.isNone()) {
      nd.kind = TD_NONE;
      r->nodes.push_back(nd);
    } else if (v.isBool()) {
      nd.kind = TD_BOOL;
      nd.i = v.toBool() ? 1 : 0;
      r->nodes.push_back(nd);
    } else if (v.isInt()) {
      nd.kind = TD_INT;
      nd.i = v.toInt();
      r->nodes.push_back(nd);
    } else if (v.isDouble()) {
      nd.kind = TD_DOUBLE;
      nd.d = v.toDouble();
      r->nodes.push_back(nd);
    } else if (v.isString()) {
      r->strings.push_back(v.toStringRef());
      nd.kind = TD_STRING;
      nd.str = r->strings.back().data();
      nd.str_len = static_cast<int64_t>(r->strings.back().size());
      r->nodes.push_back(nd);
    } else if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTuple()) {
      const auto &elems = v.toTupleRef().elements();
      nd.kind = TD_TUPLE;
      nd.n_children = static_cast<int32_t>(elems.size());
      r->nodes.push_back(nd);
      for (const auto &e : elems) value(e);
    } else if (v.isList()) {
      auto l = v.toListRef();
      nd.kind = TD_LIST;
      nd.n_children = static_cast<int32_t>(l.size());
      r->nodes.push_back(nd);
      for (const auto &e : l) value(e);
    } else if (v.isGenericDict()) {
      auto d = v.toGenericDict();
      nd.kind = TD_DICT;
      nd.n_children = static_cast<int32_t>(2 * d.size());
      r->nodes.push_back(nd);
      for (const auto &e : d) {
        value(e.key());
        value(e.value());
      }
    } else {
      throw std::invalid_argument("unsupported output type " + v.type()->repr_str());
    }
  }

  void tensor(at::Tensor t) {
    // A storage inside the caller's input memory, which is unpinned once the call
    // returns: copy it out.
    if (aliases_input(t)) t = t.clone();
    if (t.device().is_cpu() && !t.is_contiguous()) t = t.contiguous();
    td_node nd{};
    nd.kind = TD_TENSOR;
    nd.dtype = from_scalar_type(t.scalar_type());
    nd.ndim = static_cast<int32_t>(t.dim());
    r->shapes.emplace_back(t.sizes().begin(), t.sizes().end());
    nd.shape = r->shapes.back().data();
    nd.data = t.device().is_cpu() ? t.data_ptr() : nullptr;
    nd.tensor = new td_tensor{std::move(t)};
    r->nodes.push_back(nd);
  }
};

void free_result_tensors(td_result *r) {
  for (auto &nd : r->nodes) {
    if (nd.kind == TD_TENSOR) delete nd.tensor;
  }
}


// cpu_flags reads the x86 feature flags of the first processor in /proc/cpuinfo.
std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// The /proc/cpuinfo flags that code compiled for each AOTI_CPU_ISA, and for each
// torchd.march, needs. The ISA lists follow inductor's cpu_vec_isa.py arch flags; x86-64-v3
// and v4 are the psABI levels.
const std::map<std::string, std::vector<std::string>> kISAFlags = {
    {"AVX2", {"avx2", "fma"}},
    {"AVX512", {"avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"}},
    {"AMX", {"avx512f", "avx512dq", "avx512vl", "avx512bw", "avx512_vnni", "amx_tile", "amx_bf16",
             "amx_int8"}},
    // Extensions inductor adds to AOTI_CPU_ISA after the base ISA, e.g. "AVX512 AVX512_VNNI".
    {"AVX512_VNNI", {"avx512_vnni"}},
    {"AVX512_BF16", {"avx512_bf16"}},
    {"AVX512_FP16", {"avx512_fp16"}},
    {"AVX_VNNI", {"avx_vnni"}},
    {"AMX_FP16", {"amx_fp16"}},
    {"x86-64-v2", {"sse4_2", "popcnt", "ssse3"}},
    {"x86-64-v3", {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"}},
    {"x86-64-v4", {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm", "avx512f", "avx512bw",
                   "avx512cd", "avx512dq", "avx512vl"}},
};

// check_cpu refuses a package whose compiled code needs CPU features this host lacks: such
// code dies with SIGILL at its first vector instruction, so the check runs before the
// package's library is loaded. A package compiled with -march=native records only its vector
// ISA (AOTI_CPU_ISA); torchd's own packages also record their -march (torchd.march).
void check_cpu(const std::map<std::string, std::string> &md) {
  std::set<std::string> have = cpu_flags();
  if (have.empty()) return;  // not x86 Linux: nothing to compare against
  for (const char *key : {"AOTI_CPU_ISA", "torchd.march"}) {
    auto it = md.find(key);
    if (it == md.end() || it->second.empty()) continue;
    // AOTI_CPU_ISA may list several: the base ISA, then its extensions.
    std::istringstream words(it->second);
    for (std::string isa; words >> isa;) {
      auto req = kISAFlags.find(isa);
      if (req == kISAFlags.end()) {
        if (std::string(key) == "AOTI_CPU_ISA" && isa != "INVALID_VEC_ISA") {
          throw std::runtime_error("package compiled for CPU capability " + it->second +
                                   ", which torchd does not know how to check on this host");
        }
        continue;
      }
      std::string missing;
      for (const auto &f : req->second) {
        if (!have.count(f)) missing += (missing.empty() ? "" : " ") + f;
      }
      if (!missing.empty()) {
        throw std::runtime_error("package compiled for CPU capability " + it->second + " (" +
                                 key + "), but this CPU lacks " + missing +
                                 "; compile it for this host or a baseline it has "
                                 "(torch._inductor.config.cpp.march, cpp.simdlen)");
      }
    }
  }
}

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

// Float32 islands: under TD_LOAD_BF16 the submodules named at load stay float32, as mixed
// precision keeps numerically sensitive layers in float32. Each call of one is wrapped in
// torchd::fp32_enter (autocast off, its input as float32) and torchd::fp32_exit (the output in
// its input's dtype, autocast back on). They are operators so that they run in the graph's
// order; CONSERVATIVE alias analysis keeps the JIT from moving or dropping them.
struct Fp32Islands {
  int depth = 0;
  bool cpu = false, cuda = false;  // autocast as it was when the outermost island began
};
thread_local Fp32Islands fp32_islands;

at::Tensor fp32_enter(const at::Tensor &x) {
  auto &s = fp32_islands;
  if (s.depth++ == 0) {
    s.cpu = at::autocast::is_autocast_enabled(c10::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(c10::kCUDA);
    at::autocast::set_autocast_enabled(c10::kCPU, false);
    at::autocast::set_autocast_enabled(c10::kCUDA, false);
  }
  return x.is_floating_point() ? x.to(at::kFloat) : x;
}

at::Tensor fp32_exit(const at::Tensor &y, const at::Tensor &in) {
  auto &s = fp32_islands;
  if (s.depth > 0 && --s.depth == 0) {
    at::autocast::set_autocast_enabled(c10::kCPU, s.cpu);
    at::autocast::set_autocast_enabled(c10::kCUDA, s.cuda);
  }
  return y.is_floating_point() && in.is_floating_point() ? y.to(in.scalar_type()) : y;
}

TORCH_LIBRARY(torchd, m) {
  m.def(torch::schema("torchd::fp32_enter(Tensor x) -> Tensor", c10::AliasAnalysisKind::CONSERVATIVE),
        &fp32_enter);
  m.def(torch::schema("torchd::fp32_exit(Tensor y, Tensor input) -> Tensor",
                      c10::AliasAnalysisKind::CONSERVATIVE),
        &fp32_exit);
}

// Autocast's CPU list names aten::_convolution's deprecated overload only, but a traced
// model's convolutions are the current one (F.conv2d decomposes into it before the tracer
// sees it), so without this kernel they would stay float32 under autocast. It does what
// autocast does for conv2d: the floating arguments cast to the autocast dtype, autocast off
// below. (CUDA's autocast has a kernel for it.)
at::Tensor autocast_convolution(const at::Tensor &input, const at::Tensor &weight,
                                const std::optional<at::Tensor> &bias, c10::SymIntArrayRef stride,
                                c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                c10::SymIntArrayRef output_padding, c10::SymInt groups, bool benchmark,
                                bool deterministic, bool cudnn_enabled, bool allow_tf32) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  constexpr auto cpu = c10::DeviceType::CPU;
  auto dtype = at::autocast::get_autocast_dtype(cpu);
  return at::_convolution_symint(at::autocast::cached_cast(dtype, input, cpu),
                                 at::autocast::cached_cast(dtype, weight, cpu),
                                 at::autocast::cached_cast(dtype, bias, cpu), stride, padding, dilation,
                                 transposed, output_padding, std::move(groups), benchmark, deterministic,
                                 cudnn_enabled, allow_tf32);
}

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) { m.impl("_convolution", &autocast_convolution); }

// module_path returns the dotted path from graph's self to the module v is (a chain of
// prim::GetAttr), or false when v is no submodule of self.
bool module_path(torch::jit::Value *v, torch::jit::Value *self, std::string &path) {
  if (v == self) return true;
  auto *n = v->node();
  if (n->kind() != c10::prim::GetAttr || !module_path(n->input(0), self, path)) return false;
  path += (path.empty() ? "" : ".") + n->s(c10::attr::name);
  return true;
}

// wrap_fp32_calls wraps the calls in graph (the forward of mod, at prefix in the top module
// top) of the submodules named in names, and goes into the callees that hold the other
// names; it erases the names it wrapped.
void wrap_fp32_calls(torch::jit::Module &top, torch::jit::Module &mod, const std::string &prefix,
                     torch::jit::Graph &graph, std::set<std::string> &names) {
  std::vector<torch::jit::Node *> calls;
  for (auto *n : graph.nodes()) {
    if (n->kind() == c10::prim::CallMethod) calls.push_back(n);
  }
  for (auto *call : calls) {
    std::string rel;
    if (!module_path(call->input(0), graph.inputs()[0], rel)) continue;
    std::string path = prefix.empty() ? rel : prefix + "." + rel;
    torch::jit::Module callee = mod;
    for (size_t i = 0, j; i < rel.size(); i = j + 1) {
      j = std::min(rel.find('.', i), rel.size());
      callee = callee.attr(rel.substr(i, j - i)).toModule();
    }
    if (names.count(path)) {
      int tensors = 0;
      for (size_t i = 1; i < call->inputs().size(); i++) {
        tensors += call->input(i)->type()->isSubtypeOf(*c10::TensorType::get());
      }
      if (tensors != 1 || !call->input(1)->type()->isSubtypeOf(*c10::TensorType::get()) ||
          call->outputs().size() != 1 || !call->output()->type()->isSubtypeOf(*c10::TensorType::get())) {
        throw std::invalid_argument("float32 module " + path +
                                    ": only a submodule that takes one tensor first and returns one "
                                    "tensor can stay float32");
      }
      torch::jit::Value *x = call->input(1);
      torch::jit::WithInsertPoint before(call);
      call->replaceInput(1, graph.insert(c10::Symbol::fromQualString("torchd::fp32_enter"), {x}));
      torch::jit::WithInsertPoint after(call->next());
      torch::jit::Value *y = call->output();
      torch::jit::Value *out = graph.insert(c10::Symbol::fromQualString("torchd::fp32_exit"), {y, x});
      y->replaceAllUsesAfterNodeWith(out->node(), out);
      names.erase(path);
      continue;
    }
    bool inside = false;
    for (const auto &name : names) inside = inside || name.rfind(path + ".", 0) == 0;
    if (!inside) continue;
    // The callee's forward belongs to its type: rewriting it rewrites every instance's.
    for (const auto &m : top.modules()) {
      if (m.type() == callee.type() && m._ivalue().get() != callee._ivalue().get()) {
        throw std::invalid_argument("float32 modules under " + path +
                                    ": its type is shared with other submodules; name " + path +
                                    " itself");
      }
    }
    wrap_fp32_calls(top, callee, path, *callee.get_method(call->s(c10::attr::name)).graph(), names);
  }
}

// float32_outputs returns v with every reduced-precision floating tensor in it (in tensors,
// tuples and lists) as float32.
c10::IValue float32_outputs(const c10::IValue &v) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    if (t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf) return t.to(at::kFloat);
    return v;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto &e : v.toTupleRef().elements()) items.push_back(float32_outputs(e));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : v.toTensorList()) out.push_back(float32_outputs(t).toTensor());
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (const auto &e : in) out.push_back(float32_outputs(e));
    return out;
  }
  return v;
}

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


// What td_trim_arenas frees. glibc's malloc_trim gives back the free pages inside every
// arena and the top of the main one, but never the top of a thread's arena: only a free()
// of 64 KiB or more into that arena trims it (heap_trim), down to M_TOP_PAD and only past
// M_TRIM_THRESHOLD, which td_keep_freed_memory puts out of reach. Those tops are up to a
// heap (64 MiB) each, one per arena, and there are up to 8 arenas a core: registration churn
// held gigabytes that no idle trim reached. So each thread that calls into LibTorch here
// leaves one probe block in its arena per trim round, and td_trim_arenas frees them all with
// the threshold and pad at zero; a probe of an exited thread's arena is freed the same way.
std::mutex probes_mu;
std::vector<void *> probes;
std::atomic<unsigned> probe_round{1};
std::atomic<bool> keeping{false};  // td_keep_freed_memory applied: the tops are kept
thread_local unsigned probed_round = 0;
constexpr size_t kProbeBytes = 64 << 10;  // glibc's FASTBIN_CONSOLIDATION_THRESHOLD

void note_arena() {
#ifdef __GLIBC__
  if (!keeping.load(std::memory_order_relaxed)) return;
  unsigned r = probe_round.load(std::memory_order_relaxed);
  if (probed_round == r) return;
  probed_round = r;
  void *p = std::malloc(kProbeBytes);
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(probes_mu);
  probes.push_back(p);
#endif
}

}  // namespace

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
      fp32_islands = {};  // a call that threw inside an island left it begun
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

void td_set_num_threads(int n) {
  try {
    at::set_num_threads(n);
  } catch (...) {
  }
}

int td_get_num_threads(void) { return at::get_num_threads(); }

// at::set_num_threads is process-wide as well as per thread: besides the calling thread's
// OpenMP nthreads-var and MKL's thread-local count it stores the default for new threads,
// recreates the global pthreadpool (its threads included) and clears oneDNN's convolution
// cache, which every worker shares. So the per-forward setting calls the two per-thread
// setters only. They are looked up in the libraries already loaded (LibTorch's own libgomp,
// and the MKL linked into libtorch_cpu when it has one), so no second runtime is brought in.
// MKL_Set_Num_Threads_Local is the C entry point; the lower-case name takes a pointer.
namespace {
using set_threads_fn = void (*)(int);
using set_threads_local_fn = int (*)(int);
struct local_setters {
  set_threads_fn omp = nullptr;
  set_threads_local_fn mkl = nullptr;
  local_setters() {
    omp = reinterpret_cast<set_threads_fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    mkl = reinterpret_cast<set_threads_local_fn>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  }
};
}  // namespace

int td_set_num_threads_here(int n) {
  note_arena();
  static const local_setters set;
  if (n < 1) return 0;
  try {
    // A thread's first parallel work applies LibTorch's process default to it (lazily, once);
    // done now, it cannot later overwrite the count set here.
    at::get_num_threads();
    if (set.omp == nullptr) {
      at::set_num_threads(n);
      return at::get_num_threads();
    }
    set.omp(n);
    if (set.mkl != nullptr) set.mkl(n);
    return at::get_num_threads();
  } catch (...) {
    return 0;
  }
}

// glibc serves a block over its mmap threshold (128 KiB, rising to the largest block freed,
// at most 32 MiB) with its own mmap and unmaps it on free; it trims a heap whose free top
// passes the trim threshold; and a thread arena's heap (64 MiB at most) that becomes empty is
// unmapped unless the heap before it has less than the top pad free. A CNN's activations
// are such blocks, so every forward faulted them in and zeroed them afresh, by an amount
// that depended on the worker thread's arena. With mmap off, the trim threshold out of reach
// and a top pad of a whole heap, the arenas keep what they grew to (a block bigger than a
// heap is still mmap'd) and the faults stop after the first forwards; without the pad a
// worker still made and unmapped a heap per forward. Figures: docs/design/binding.md.
int td_keep_freed_memory(void) {
#ifdef __GLIBC__
  bool ok = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
            mallopt(M_TOP_PAD, 64 << 20) == 1;
  keeping.store(ok);
  return ok;
#else
  return 0;
#endif
}

// The probes are freed with the trim threshold and pad at zero, so that each free trims its
// arena's top whole; then the settings that keep freed memory come back. Other threads'
// frees in that moment trim their arenas too, which costs them page faults, nothing else.
int td_trim_arenas(void) {
#ifdef __GLIBC__
  if (!keeping.load()) return 0;
  static std::mutex trims;  // one round at a time: another's restore would cut this one short
  std::lock_guard<std::mutex> one(trims);
  std::vector<void *> ps;
  {
    std::lock_guard<std::mutex> lock(probes_mu);
    ps.swap(probes);
    probe_round.fetch_add(1);
  }
  mallopt(M_TRIM_THRESHOLD, 0);
  mallopt(M_TOP_PAD, 0);
  for (void *p : ps) std::free(p);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_TOP_PAD, 64 << 20);
  return static_cast<int>(ps.size());
#else
  return 0;
#endif
}

td_error td_set_num_interop_threads(int n) {
  return guard([&] { at::set_num_interop_threads(n); });
}

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

// ---- Explanations: Integrated Gradients -------------------------------------------------

#include <torch/csrc/autograd/autograd.h>

extern "C" {

td_error td_module_integrated_gradients(td_module *m, const char *method, const td_node *nodes,
                                        int n_nodes, int arg, const double *alphas,
                                        const double *weights, int n_steps, int64_t target,
                                        td_result **out) {
  note_arena();
  *out = nullptr;
  auto r = std::make_unique<td_result>();
  td_error err = guard([&] {
    // Gradients need autograd: leave InferenceMode and no_grad off on this thread.
    c10::InferenceMode no_inference(false);
    c10::AutoGradMode grad_mode(true);
    std::string name = method == nullptr || *method == '\0' ? "forward" : method;
    auto fn = m->module.find_method(name);
    if (!fn) throw std::invalid_argument("model has no method '" + name + "'");
    if (n_steps < 1) throw std::invalid_argument("integrated gradients need at least one step");
    Builder b{nodes, n_nodes, 0, m->device};
    std::vector<c10::IValue> args;
    while (b.pos < n_nodes) args.push_back(b.value());
    if (args.size() < 2) throw std::invalid_argument("integrated gradients need the arguments and a baseline");
    c10::IValue base_v = args.back();
    args.pop_back();
    if (arg < 0 || arg >= static_cast<int>(args.size()) || !args[arg].isTensor() || !base_v.isTensor()) {
      throw std::invalid_argument("integrated gradients: argument " + std::to_string(arg) +
                                  " and the baseline must be tensors");
    }
    at::Tensor x = args[arg].toTensor();
    at::Tensor base = base_v.toTensor();
    if (!x.is_floating_point() || x.dim() < 1 || !base.sizes().equals(x.sizes())) {
      throw std::invalid_argument("integrated gradients: the input must be floating point [B, ...] and the baseline of its shape");
    }
    const int64_t n = n_steps, batch = x.size(0);
    std::vector<int64_t> step_shape(x.dim() + 1, 1);
    step_shape[0] = n;
    std::vector<int64_t> flat = x.sizes().vec();
    flat[0] = n * batch;
    auto opts = x.options();
    at::Tensor alpha = at::tensor(std::vector<double>(alphas, alphas + n), opts.dtype(at::kDouble)).to(opts).view(step_shape);
    at::Tensor weight = at::tensor(std::vector<double>(weights, weights + n), opts.dtype(at::kDouble)).to(opts).view(step_shape);
    at::Tensor diff = x - base;
    // Step-major, as Captum concatenates them: all rows of step 0, then of step 1, ...
    at::Tensor scaled = (base.unsqueeze(0) + alpha * diff.unsqueeze(0)).reshape(flat).detach().requires_grad_(true);
    for (size_t i = 0; i < args.size(); ++i) {
      if (static_cast<int>(i) == arg) {
        args[i] = scaled;
      } else if (args[i].isTensor()) {
        at::Tensor t = args[i].toTensor();
        if (t.dim() < 1 || t.size(0) != batch) {
          throw std::invalid_argument("integrated gradients: argument " + std::to_string(i) + " must have the input's leading dimension");
        }
        std::vector<int64_t> rep(t.dim(), 1);
        rep[0] = n;
        args[i] = t.repeat(rep);
      }
    }
    c10::IValue res = (*fn)(std::move(args));
    at::Tensor logits;
    if (res.isTensor()) {
      logits = res.toTensor();
    } else if (res.isTuple() && !res.toTupleRef().elements().empty() && res.toTupleRef().elements()[0].isTensor()) {
      logits = res.toTupleRef().elements()[0].toTensor();
    } else {
      throw std::invalid_argument("integrated gradients: the model must return a tensor of logits");
    }
    if (logits.dim() != 2 || logits.size(0) != n * batch) {
      throw std::invalid_argument("integrated gradients: the model must return [rows, classes] logits");
    }
    if (target < 0 || target >= logits.size(1)) {
      throw std::invalid_argument("target " + std::to_string(target) + " is not a class of the model's " +
                                  std::to_string(logits.size(1)));
    }
    at::Tensor grads = torch::autograd::grad({logits.select(1, target).sum()}, {scaled})[0];
    std::vector<int64_t> by_step = x.sizes().vec();
    by_step.insert(by_step.begin(), n);
    at::Tensor total = (grads.reshape(by_step) * weight).sum(0);
    at::Tensor attributions = (total * diff).detach().to(at::kFloat).to(c10::kCPU).contiguous();
    Flattener{r.get(), b.borrowed}.value(c10::IValue(attributions));
  });
  if (err != nullptr) {
    free_result_tensors(r.get());
    return err;
  }
  *out = r.release();
  return nullptr;
}

}  // extern "C"
