// RMSprop, Adagrad and Adadelta (rmsprop.h, adagrad.h, adadelta.h): each keeps per-parameter
// state tensors and runs its rule from kernels/math/optimizer_step.h -- on the CPU through
// kernels::cpu::rule_update, on CUDA through one multi-tensor kernel.
#include <array>
#include <cmath>

#include "kernels/cpu/optimizer_loop.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/optimizer_step.h"
#include "optim/adadelta.h"
#include "optim/adagrad.h"
#include "optim/rmsprop.h"

namespace hg::optim {

namespace {

void check_finite_non_negative(std::string_view what, std::initializer_list<std::pair<const char*, double>> values) {
  for (const auto& [name, v] : values)
    HG_CHECK(std::isfinite(v) && v >= 0, what, ": ", name, " must be finite and >= 0, got ", v);
}


}  // namespace

// ---- RMSprop ---------------------------------------------------------------------------------

RMSprop::RMSprop(const std::vector<Tensor>& params, RMSpropOptions o)
    : Optimizer(params, o.lr, o.master_weights), options(o) {
  check_finite_non_negative("RMSprop", {{"alpha", o.alpha}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
                                        {"momentum", o.momentum}});
  HG_CHECK(o.alpha <= 1, "RMSprop: alpha must be in [0, 1], got ", o.alpha);
}

void RMSprop::set_momentum(double momentum) {
  HG_CHECK(momentum >= 0 && std::isfinite(momentum), "RMSprop: momentum must be finite and >= 0, got ", momentum);
  options.momentum = momentum;
}

std::vector<std::string_view> RMSprop::state_names() const {
  std::vector<std::string_view> names = {"square_avg"};
  if (options.momentum > 0) names.push_back("momentum_buffer");
  if (options.centered) names.push_back("grad_avg");
  return names;
}

namespace {
kernels::math::RmspropStep rmsprop_rule(const RMSpropOptions& o, double lr) {
  return {lr, o.alpha, o.eps, o.weight_decay, o.momentum, o.centered};
}
}  // namespace

// The rule's three state slots (square_avg, momentum_buffer, grad_avg); the ones these options do
// not keep stay undefined (scratch in the kernels).
std::array<Tensor, 3> RMSprop::slots(ParamState& state, const Tensor& weight) {
  return {state_tensor(state, weight, "square_avg"),
          options.momentum > 0 ? state_tensor(state, weight, "momentum_buffer") : Tensor(),
          options.centered ? state_tensor(state, weight, "grad_avg") : Tensor()};
}

void RMSprop::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  kernels::cpu::rule_update(rmsprop_rule(options, lr), double(state.step), weight, grad,
                            slots(state, weight));
}

void RMSprop::update_cuda(DeviceGroup& g, const amp::StepControl& control) {
  std::vector<std::array<Tensor, 3>> all;
  for (size_t i = 0; i < g.params.size(); ++i) all.push_back(slots(*g.states[i], g.weights[i]));
  kernels::cuda::rmsprop_update(g.weights, g.params, g.grads, all, rmsprop_rule(options, g.lr), control.found_inf,
                                control.scale);
}

// ---- Adagrad ---------------------------------------------------------------------------------

Adagrad::Adagrad(const std::vector<Tensor>& params, AdagradOptions o)
    : Optimizer(params, o.lr, o.master_weights), options(o) {
  check_finite_non_negative("Adagrad", {{"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
                                        {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}});
}

void Adagrad::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  const kernels::math::AdagradStep rule{lr, options.lr_decay, options.weight_decay, options.eps};
  kernels::cpu::rule_update(rule, double(state.step), weight, grad,
                            {state_tensor(state, weight, "sum", options.initial_accumulator_value), {}, {}});
}

void Adagrad::update_cuda(DeviceGroup& g, const amp::StepControl& control) {
  std::vector<std::array<Tensor, 3>> slots;
  for (size_t i = 0; i < g.params.size(); ++i)
    slots.push_back({state_tensor(*g.states[i], g.weights[i], "sum", options.initial_accumulator_value), {}, {}});
  kernels::cuda::adagrad_update(g.weights, g.params, g.grads, slots, g.steps,
                                {g.lr, options.lr_decay, options.weight_decay, options.eps}, control.found_inf,
                                control.scale);
}

// ---- Adadelta --------------------------------------------------------------------------------


Adadelta::Adadelta(const std::vector<Tensor>& params, AdadeltaOptions o)
    : Optimizer(params, o.lr, o.master_weights), options(o) {
  check_finite_non_negative("Adadelta", {{"rho", o.rho}, {"eps", o.eps}, {"weight_decay", o.weight_decay}});
  HG_CHECK(o.rho <= 1, "Adadelta: rho must be in [0, 1], got ", o.rho);
}

void Adadelta::update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) {
  const kernels::math::AdadeltaStep rule{lr, options.rho, options.eps, options.weight_decay};
  kernels::cpu::rule_update(rule, double(state.step), weight, grad,
                            {state_tensor(state, weight, "square_avg"), state_tensor(state, weight, "acc_delta"), {}});
}

void Adadelta::update_cuda(DeviceGroup& g, const amp::StepControl& control) {
  std::vector<std::array<Tensor, 3>> slots;
  for (size_t i = 0; i < g.params.size(); ++i)
    slots.push_back({state_tensor(*g.states[i], g.weights[i], "square_avg"),
                     state_tensor(*g.states[i], g.weights[i], "acc_delta"), {}});
  kernels::cuda::adadelta_update(g.weights, g.params, g.grads, slots,
                                 {g.lr, options.rho, options.eps, options.weight_decay}, control.found_inf,
                                 control.scale);
}

}  // namespace hg::optim
