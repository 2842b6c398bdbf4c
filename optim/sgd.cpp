// SGD (see sgd.h).
#include "optim/sgd.h"

#include "ops/cuda_ops.h"
#include "optim/update_loop.h"

namespace hg::optim {

SGD::SGD(const std::vector<Tensor>& params, SGDOptions opts) : Optimizer(params, opts.lr, opts.master_weights), options(opts) {
  HG_CHECK(opts.momentum >= 0 && opts.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0");
  HG_CHECK(!opts.nesterov || (opts.momentum > 0 && opts.dampening == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  const double momentum = options.momentum, dampening = options.dampening, wd = options.weight_decay;
  const bool nesterov = options.nesterov;
  if (momentum == 0) {
    detail::for_each_element<2>({weight, grad}, [=](auto& v) {
      using A = std::decay_t<decltype(v[0])>;
      const A d = v[1] + A(wd) * v[0];
      v[0] -= A(lr) * d;
    });
    return;
  }
  Tensor& buffer = state.tensors["momentum_buffer"];
  const bool first = !buffer.defined();
  if (first) buffer = zeros_like(weight);
  detail::for_each_element<3>({weight, grad, buffer}, [=](auto& v) {
    using A = std::decay_t<decltype(v[0])>;
    const A d = v[1] + A(wd) * v[0];
    v[2] = first ? d : A(momentum) * v[2] + A(1 - dampening) * d;
    v[0] -= A(lr) * (nesterov ? d + A(momentum) * v[2] : v[2]);
  });
}

}  // namespace hg::optim

namespace hg::optim {

void SGD::update_cuda(DeviceGroup& group, const amp::StepControl& control) {
  std::vector<Tensor> buffers;
  for (size_t i = 0; i < group.params.size(); ++i) {
    Tensor& buffer = group.states[i]->tensors["momentum_buffer"];
    if (options.momentum != 0 && !buffer.defined()) buffer = zeros_like(group.weights[i]);
    buffers.push_back(buffer);
  }
  cuda_ops::sgd_update(group.weights, group.params, group.grads, buffers, group.steps,
                       {group.lr, options.momentum, options.dampening, options.weight_decay, options.nesterov},
                       control.found_inf, control.scale);
}

}  // namespace hg::optim
