// Activations. Each is its formula in kernels/math/activation.h run by the elementwise kernel, and a
// backward that runs the formula's derivative the same way (from the saved input, or from the
// saved output where that is cheaper: sigmoid, tanh).
#include "ops/activation.h"

#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/vectorised_activation.h"
#include "kernels/math/activation.h"
#include "kernels/reduce.h"
#include "kernels/relu_bits.h"
#include "ops/elementwise.h"  // check_same_device
#include "ops/record.h"

namespace hg {


namespace {

// An activation whose backward needs its input x (x already through amp::prepare). `formula`
// carries the activation's parameters (leaky_relu's slope) into the forward kernel and the
// backward.
template <class Math>
Tensor activation_of_prepared(amp::Op op, const Tensor& x, Math formula) {
  HG_CHECK(is_floating(x.dtype()), amp::op_name(op), ": expected a floating tensor, got ", x.dtype());
  Tensor out = kernels::map_to_new<1>(x.shape(), {x}, kernels::math::Forward<Math>{formula});
  record(op, out, {x}, [sx = SavedTensor(x), formula](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {kernels::map_to_new<2>(x.shape(), {x, g}, kernels::math::BackwardFromInput<Math>{formula})};
  });
  return out;
}

template <class Math>
Tensor activation_from_input(amp::Op op, const Tensor& input, Math formula = {}) {
  auto [x] = amp::prepare(op, input);
  return activation_of_prepared(op, x, formula);
}

// An activation whose backward is cheapest from its output y.
template <class Math>
Tensor activation_from_output(amp::Op op, const Tensor& input, Tensor (*vectorised)(const Tensor&) = nullptr) {
  const std::string_view name = amp::op_name(op);
  auto [x] = amp::prepare(op, input);
  HG_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype());
  // The CPU's f32/f16/bf16 forward on the vectorised exp (kernels/vectorised_activation.h), where
  // the op has one; the backward reads only the output.
  Tensor out = vectorised && kernels::activation_vectorised(x) ? vectorised(x)
                                                               : kernels::map_to_new<1>(x.shape(), {x}, kernels::math::Forward<Math>{});
  record(op, out, {x}, [sy = SavedTensor(out)](const Tensor& g) -> std::vector<Tensor> {
    const Tensor y = sy.get();
    return {kernels::map_to_new<2>(y.shape(), {y, g}, kernels::math::BackwardFromOutput<Math>{})};
  });
  return out;
}

// An activation from its input on the CPU's vectorised kernels (kernels/vectorised_activation.h:
// the same formula as Math's, within 2 ulp) for f32/f16/bf16, Math's functor elsewhere.
template <class Math>
Tensor vectorised_from_input(amp::Op op, const Tensor& input, Tensor (*forward)(const Tensor&),
                             Tensor (*backward)(const Tensor&, const Tensor&)) {
  if (!kernels::activation_vectorised(input)) return activation_from_input<Math>(op, input);
  auto [x] = amp::prepare(op, input);
  Tensor out = forward(x);
  record(op, out, {x}, [sx = SavedTensor(x), backward](const Tensor& g) -> std::vector<Tensor> {
    return {backward(sx.get(), g)};
  });
  return out;
}

// relu (max +inf) or relu6 (max 6): after autocast, the backward of f16 and bf16 CPU tensors
// as a selection of bits (kernels/relu_bits.h: the same values as Math's, without widening
// them), everything else as activation_from_input's.
template <class Math>
Tensor relu_family(amp::Op op, const Tensor& input, Math formula, double max) {
  auto [x] = amp::prepare(op, input);
  if (!kernels::relu_bits_apply(x)) return activation_of_prepared(op, x, formula);
  Tensor out = kernels::map_to_new<1>(x.shape(), {x}, kernels::math::Forward<Math>{formula});
  record(op, out, {x}, [sx = SavedTensor(x), max](const Tensor& g) -> std::vector<Tensor> {
    return {kernels::relu_backward_bits(sx.get(), g, max)};
  });
  return out;
}

}  // namespace

// ---- the ops ------------------------------------------------------------------------------------

Tensor relu(const Tensor& x) { return relu_family(amp::Op::Relu, x, kernels::math::Relu{}, INFINITY); }
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation_from_input(amp::Op::LeakyRelu, x, kernels::math::LeakyRelu{negative_slope});
}
Tensor gelu(const Tensor& x) {
  return vectorised_from_input<kernels::math::Gelu>(amp::Op::Gelu, x, kernels::gelu_forward_cpu, kernels::gelu_backward_cpu);
}
Tensor silu(const Tensor& x) {
  return vectorised_from_input<kernels::math::Silu>(amp::Op::Silu, x, kernels::silu_forward_cpu, kernels::silu_backward_cpu);
}
Tensor sigmoid(const Tensor& x) {
  return activation_from_output<kernels::math::Sigmoid>(amp::Op::Sigmoid, x, kernels::sigmoid_forward_cpu);
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  HG_CHECK(beta != 0 && std::isfinite(beta), "softplus: beta must be finite and nonzero, got ", beta);
  if (beta == 1 && threshold == 20)  // PyTorch's defaults: the vectorised kernels on the CPU
    return vectorised_from_input<kernels::math::Softplus>(amp::Op::Softplus, x, kernels::softplus_forward_cpu,
                                                          kernels::softplus_backward_cpu);
  return activation_from_input(amp::Op::Softplus, x, kernels::math::Softplus{beta, threshold});
}
Tensor tanh(const Tensor& x) { return activation_from_output<kernels::math::Tanh>(amp::Op::Tanh, x, kernels::tanh_forward_cpu); }

Tensor gelu(const Tensor& x, GeluOptions options) {
  HG_CHECK(options.approximate == "none" || options.approximate == "tanh",
           "gelu: approximate must be \"none\" or \"tanh\", got \"", options.approximate, "\"");
  if (options.approximate == "none") return gelu(x);
  return activation_from_input<kernels::math::GeluTanh>(amp::Op::Gelu, x);
}

namespace km = kernels::math;

Tensor relu6(const Tensor& x) { return relu_family(amp::Op::Relu6, x, km::Hardtanh{0.0, 6.0}, 6.0); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  HG_CHECK(min_val <= max_val, "hardtanh: min_val (", min_val, ") must not be above max_val (", max_val, ")");
  return activation_from_input(amp::Op::Hardtanh, x, km::Hardtanh{min_val, max_val});
}
Tensor hardsigmoid(const Tensor& x) { return activation_from_input<km::Hardsigmoid>(amp::Op::Hardsigmoid, x); }
Tensor hardswish(const Tensor& x) { return activation_from_input<km::Hardswish>(amp::Op::Hardswish, x); }
Tensor elu(const Tensor& x, double alpha) { return activation_from_input(amp::Op::Elu, x, km::Elu{alpha, 1.0, 1.0}); }
Tensor selu(const Tensor& x) {
  return activation_from_input(amp::Op::Selu, x, km::Elu{km::kSeluAlpha, km::kSeluScale, 1.0});
}
Tensor celu(const Tensor& x, double alpha) {
  HG_CHECK(alpha != 0, "celu: alpha must be nonzero (the formula divides by it)");
  return activation_from_input(amp::Op::Celu, x, km::Elu{alpha, 1.0, 1.0 / alpha});
}
Tensor mish(const Tensor& x) { return activation_from_input<km::Mish>(amp::Op::Mish, x); }
Tensor softsign(const Tensor& x) { return activation_from_input<km::Softsign>(amp::Op::Softsign, x); }
Tensor logsigmoid(const Tensor& x) { return activation_from_input<km::LogSigmoid>(amp::Op::LogSigmoid, x); }

Tensor prelu(const Tensor& x_in, const Tensor& w_in) {
  const std::string_view name = amp::op_name(amp::Op::Prelu);
  auto [x0, w0] = amp::prepare(amp::Op::Prelu, x_in, w_in);
  detail::check_same_device(name, x0, w0);
  const DType dtype = promote_types(x0.dtype(), w0.dtype());
  HG_CHECK(is_floating(dtype), name, ": expected floating tensors, got ", x0.dtype(), " and ", w0.dtype());
  const int64_t channels = x0.dim() >= 2 ? x0.shape()[1] : 1;
  HG_CHECK(w0.numel() == 1 || w0.numel() == channels, name, ": weight must have 1 element or one per channel (",
           channels, ", dim 1 of the input ", x0.shape(), "), got ", w0.shape());
  const Tensor x = x0.to(dtype), w = w0.to(dtype);
  // w laid out to broadcast against x: (1, C, 1, ...), or a single value.
  Shape broadcast(static_cast<size_t>(x.dim()), 1);
  if (w.numel() > 1) broadcast[1] = channels;
  const Tensor wb = w.detach().contiguous().reshape(broadcast);
  Tensor out = kernels::map_to_new<2>(x.shape(), {x, wb}, kernels::math::Prelu{});
  record(amp::Op::Prelu, out, {x, w},
         [sx = SavedTensor(x), sw = SavedTensor(wb), w_shape = w.shape(), name](const Tensor& g) -> std::vector<Tensor> {
           const Tensor x = sx.get(), wb = sw.get();
           Tensor gx = kernels::map_to_new<3>(x.shape(), {x, wb, g}, kernels::math::PreluInputGrad{});
           // dw: x * g where x <= 0, summed over every dimension but the channels (all of them
           // for a single slope).
           const Tensor terms = kernels::map_to_new<2>(x.shape(), {x, g}, kernels::math::PreluWeightGrad{});
           Shape dims;
           for (int d = 0; d < x.dim(); ++d)
             if (!(d == 1 && wb.numel() > 1)) dims.push_back(d);
           Tensor gw = dims.empty() ? terms
                                    : kernels::reduce(kernels::ReduceKind::Sum, kernels::plan_reduction(terms, dims, name), false);
           return {gx, gw.reshape(w_shape)};
         });
  return out;
}

}  // namespace hg
