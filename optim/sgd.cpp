// SGD (see sgd.h).
#include "optim/sgd.h"

#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/optimizer_step.h"
#include "kernels/cpu/optimizer_loop.h"
#include "kernels/cpu/rounded_update.h"

namespace hg::optim {

SGD::SGD(const std::vector<Tensor>& params, SGDOptions opts)
    : Optimizer(params, opts.lr, opts.master_weights, opts.rounding, opts.seed), options(opts) {
  HG_CHECK(opts.momentum >= 0 && opts.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0");
  HG_CHECK(!opts.nesterov || (opts.momentum > 0 && opts.dampening == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::set_momentum(double momentum) {
  HG_CHECK(momentum >= 0 && std::isfinite(momentum), "SGD: momentum must be finite and >= 0, got ", momentum);
  options.momentum = momentum;
}

void SGD::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  const kernels::math::SgdStep rule{lr, options.momentum, options.dampening, options.weight_decay, options.nesterov};
  const bool rounded = rounding() != Rounding::Nearest;
  if (rule.momentum == 0) {
    const auto apply = [=](auto& v) {
      auto no_buffer = v[0];
      rule.apply(v[0], v[1], no_buffer, true);
    };
    if (!rounded) return kernels::cpu::for_each_element<2>({weight, grad}, apply);
    return kernels::cpu::for_each_element_rounded<2>({weight, grad}, apply, rounded_store(weight, state));
  }
  Tensor& buffer = state.tensors["momentum_buffer"];
  const bool first = !buffer.defined();
  if (first) buffer = zeros_like(weight);
  const auto apply = [=](auto& v) { rule.apply(v[0], v[1], v[2], first); };
  if (!rounded) return kernels::cpu::for_each_element<3>({weight, grad, buffer}, apply);
  kernels::cpu::for_each_element_rounded<3>({weight, grad, buffer}, apply, rounded_store(weight, state));
}

}  // namespace hg::optim

namespace hg::optim {

// The CPU's first-step rule needs to know whether the buffer holds a value; on the GPU a step may
// be skipped without the host knowing, so a device flag per buffer says it: created 0 with the
// buffer (1 for a buffer loaded from a state dict), set to 1 by the step that applies.
void SGD::update_cuda(DeviceGroup& group, const amp::StepControl& control) {
  std::vector<Tensor> buffers, ready;
  for (size_t i = 0; i < group.params.size(); ++i) {
    ParamState& state = *group.states[i];
    Tensor buffer;  // stays undefined without momentum (and no state entry is made for it)
    if (options.momentum != 0) {
      Tensor& held = state.tensors["momentum_buffer"];
      if (!state.momentum_ready.defined())
        state.momentum_ready = full({}, held.defined() ? 1.0 : 0.0, {.dtype = i32, .device = group.params[i].device()});
      if (!held.defined()) held = zeros_like(group.weights[i]);
      group.flags.push_back(state.momentum_ready);
      buffer = held;
    }
    buffers.push_back(buffer);
    ready.push_back(state.momentum_ready);
  }
  kernels::cuda::sgd_update(group.weights, group.params, group.grads, buffers, ready,
                       {group.lr, options.momentum, options.dampening, options.weight_decay, options.nesterov},
                       control.found_inf, control.scale);
}

bool SGD::holds_value(const ParamState& state, const std::string& name) const {
  if (name != "momentum_buffer" || !state.momentum_ready.defined()) return true;
  return state.momentum_ready.item<int32_t>() != 0;  // waits for the GPU (state_dict does anyway)
}

}  // namespace hg::optim
