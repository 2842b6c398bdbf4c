// Adam and AdamW (see adam.h).
#include "optim/adam.h"

#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/optimizer_step.h"
#include "kernels/cpu/optimizer_loop.h"
#include "kernels/cpu/rounded_update.h"

namespace hg::optim {

Adam::Adam(const std::vector<Tensor>& params, AdamOptions opts) : Adam(params, opts, false) {}

Adam::Adam(const std::vector<Tensor>& params, AdamOptions opts, bool decoupled)
    : Optimizer(params, opts.lr, opts.master_weights, opts.rounding, opts.seed), options(opts), decoupled_(decoupled) {
  HG_CHECK(opts.beta1 >= 0 && opts.beta1 < 1 && opts.beta2 >= 0 && opts.beta2 < 1,
           "Adam: betas must be in [0, 1), got ", opts.beta1, " and ", opts.beta2);
  HG_CHECK(opts.eps >= 0 && opts.weight_decay >= 0, "Adam: eps and weight_decay must be >= 0");
}

AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions o)
    : Adam(params, {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.master_weights, o.rounding, o.seed}, true) {}

void Adam::set_momentum(double beta1) {
  HG_CHECK(beta1 >= 0 && beta1 < 1, "Adam: beta1 must be in [0, 1), got ", beta1);
  options.beta1 = beta1;
}

void Adam::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  Tensor& m = state.tensors["exp_avg"];
  Tensor& v2 = state.tensors["exp_avg_sq"];
  if (!m.defined()) m = zeros_like(weight), v2 = zeros_like(weight);
  const kernels::math::AdamStep rule{lr, options.beta1, options.beta2, options.eps, options.weight_decay, decoupled_};
  const kernels::math::AdamStep::Factors factors = rule.factors(double(state.step));
  const auto apply = [=](auto& v) { rule.apply(v[0], v[1], v[2], v[3], factors); };
  if (rounding() == Rounding::Nearest) return kernels::cpu::for_each_element<4>({weight, grad, m, v2}, apply);
  kernels::cpu::for_each_element_rounded<4>({weight, grad, m, v2}, apply, rounded_store(weight, state));
}

}  // namespace hg::optim

namespace hg::optim {

void Adam::update_cuda(DeviceGroup& group, const amp::StepControl& control) {
  std::vector<Tensor> m, v;
  for (size_t i = 0; i < group.params.size(); ++i) {
    Tensor& exp_avg = group.states[i]->tensors["exp_avg"];
    Tensor& exp_avg_sq = group.states[i]->tensors["exp_avg_sq"];
    if (!exp_avg.defined()) exp_avg = zeros_like(group.weights[i]), exp_avg_sq = zeros_like(group.weights[i]);
    m.push_back(exp_avg);
    v.push_back(exp_avg_sq);
  }
  kernels::cuda::adam_update(group.weights, group.params, group.grads, m, v, group.steps,
                        {group.lr, options.beta1, options.beta2, options.eps, options.weight_decay, decoupled_},
                        control.found_inf, control.scale);
}

}  // namespace hg::optim
