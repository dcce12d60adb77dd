// explain.cc: explanations, Integrated Gradients through autograd.

#include "values.h"

#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>

using namespace td;

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
