// Adam and AdamW (see adam.h).
#include "optim/adam.h"

#include <cmath>

#include "ops/cuda_ops.h"
#include "optim/update_loop.h"

namespace hg::optim {

Adam::Adam(const std::vector<Tensor>& params, AdamOptions opts) : Adam(params, opts, false) {}

Adam::Adam(const std::vector<Tensor>& params, AdamOptions opts, bool decoupled)
    : Optimizer(params, opts.lr, opts.master_weights), options(opts), decoupled_(decoupled) {
  HG_CHECK(opts.beta1 >= 0 && opts.beta1 < 1 && opts.beta2 >= 0 && opts.beta2 < 1,
           "Adam: betas must be in [0, 1), got ", opts.beta1, " and ", opts.beta2);
  HG_CHECK(opts.eps >= 0 && opts.weight_decay >= 0, "Adam: eps and weight_decay must be >= 0");
}

AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions o)
    : Adam(params, {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.master_weights}, true) {}

void Adam::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  Tensor& m = state.tensors["exp_avg"];
  Tensor& v2 = state.tensors["exp_avg_sq"];
  if (!m.defined()) m = zeros_like(weight), v2 = zeros_like(weight);
  const double b1 = options.beta1, b2 = options.beta2, eps = options.eps, wd = options.weight_decay;
  const double t = double(state.step);
  const double step_size = lr / (1 - std::pow(b1, t));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(b2, t));
  const bool decoupled = decoupled_;
  detail::for_each_element<4>({weight, grad, m, v2}, [=](auto& v) {
    using A = std::decay_t<decltype(v[0])>;
    A g = v[1];
    if (decoupled) v[0] *= A(1 - lr * wd);
    else if (wd != 0) g += A(wd) * v[0];
    v[2] = v[2] * A(b1) + g * A(1 - b1);
    v[3] = v[3] * A(b2) + A(1 - b2) * g * g;
    const A denom = std::sqrt(v[3]) / A(bias_correction2_sqrt) + A(eps);
    v[0] += A(-step_size) * (v[2] / denom);
  });
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
  cuda_ops::adam_update(group.weights, group.params, group.grads, m, v, group.steps,
                        {group.lr, options.beta1, options.beta2, options.eps, options.weight_decay, decoupled_},
                        control.found_inf, control.scale);
}

}  // namespace hg::optim
