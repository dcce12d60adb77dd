// bf16.cc: bfloat16 through autocast, and the float32 islands inside it (TD_LOAD_BF16).

#include "internal.h"

#include <ATen/autocast_mode.h>

namespace td {

namespace {

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

}  // namespace

void reset_fp32_islands() { fp32_islands = {}; }

namespace {

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

}  // namespace

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

}  // namespace td
