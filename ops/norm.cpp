// batch_norm, layer_norm, group_norm and instance_norm: checks, autocast, the kernels of kernels/norm.h and one autograd node
// each, the same on every device.
#include "ops/norm.h"

#include <limits>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/copy.h"
#include "kernels/norm.h"
#include "ops/activation.h"
#include "ops/elementwise.h"  // check_same_device
#include "ops/record.h"
#include "ops/reduce.h"

namespace hg {


namespace {

// The normalisation and its node: activation(batch_norm(x) [+ residual]) in one pass with an
// activation or a defined residual (CPU only; the residual contiguous, of x's shape and dtype).
struct BatchNormArguments {
  const Tensor &running_mean, &running_var;
  bool training = false;
  double momentum = 0, eps = 0;
};

Tensor normalise(const Tensor& x, const Tensor& weight, const Tensor& bias, const BatchNormArguments& a,
                 kernels::NormActivation activation, const Tensor& residual) {
  kernels::NormStatistics stats;
  Tensor out = kernels::batch_norm_forward(x, a.running_mean, a.running_var, weight, bias, a.training, a.momentum,
                                           a.eps, stats, activation, residual);
  // With an activation the backward reads the output (where the activation passed the gradient):
  // the next layer keeps it anyway, so it costs no memory.
  const bool activated = activation != kernels::NormActivation::None;
  record(amp::Op::BatchNorm, out, {x, weight, bias, residual},
         [sx = SavedTensor(x), sw = SavedTensor(weight), sy = SavedTensor(activated ? out : Tensor()), activation,
          stats = std::move(stats), training = a.training, has_b = bias.defined(),
          has_residual = residual.defined()](const Tensor& grad) -> std::vector<Tensor> {
           kernels::NormGradients g = kernels::batch_norm_backward(sx.get(), grad.contiguous(), sw.get(), stats,
                                                                   training, activation, sy.get(), has_residual);
           return {g.dx, sw.defined() ? g.dw : Tensor(), has_b ? g.db : Tensor(), g.dresidual};
         });
  return out;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps, Epilogue epilogue,
                  const Tensor& residual) {
  HG_CHECK(epilogue != Epilogue::Gelu, "batch_norm: the Gelu epilogue is linear's only (write gelu(batch_norm(...)))");
  const kernels::NormActivation activation = epilogue == Epilogue::Relu    ? kernels::NormActivation::Relu
                                             : epilogue == Epilogue::Relu6 ? kernels::NormActivation::Relu6
                                                                           : kernels::NormActivation::None;
  auto [x0, weight, bias] = amp::prepare(amp::Op::BatchNorm, x_in, weight_in, bias_in);
  HG_CHECK(x0.dim() >= 2, "batch_norm: input must be (N, C, ...), got ", x0.shape());
  HG_CHECK(is_floating(x0.dtype()), "batch_norm: expected a floating input, got ", x0.dtype());
  const int64_t C = x0.shape()[1];
  for (const Tensor* t : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (t->defined()) {
      HG_CHECK(t->dim() == 1 && t->shape()[0] == C, "batch_norm: expected per-channel tensors of shape [", C, "], got ",
               t->shape());
      detail::check_same_device("batch_norm", x0, *t);
    }
  HG_CHECK(training || (running_mean.defined() && running_var.defined()),
           "batch_norm: evaluation mode needs running_mean and running_var");
  if (residual.defined()) {
    HG_CHECK(residual.shape() == x0.shape(), "batch_norm: the residual must have the input's shape ", x0.shape(),
             ", got ", residual.shape());
    detail::check_same_device("batch_norm", x0, residual);
  }
  const Tensor x = x0.contiguous();
  if (C == 0) return empty(x.shape(), x.options());  // no channels: nothing to normalise
  HG_CHECK(!training || x.numel() / C > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
           x.shape());
  const BatchNormArguments args{running_mean, running_var, training, momentum, eps};
  // One pass on the CPU; composed on CUDA (its kernels have no epilogue) and when the add would
  // promote the residual's dtype (same results, more passes).
  if (x.device().is_cpu() && (!residual.defined() || residual.dtype() == x.dtype()))
    return normalise(x, weight, bias, args, activation, residual.defined() ? residual.contiguous() : Tensor());
  Tensor y = normalise(x, weight, bias, args, kernels::NormActivation::None, Tensor());
  if (residual.defined()) y = y + residual;
  return epilogue == Epilogue::Relu ? relu(y) : epilogue == Epilogue::Relu6 ? relu6(y) : y;
}

// ---- layer_norm: groups are the rows of x viewed as (rows, D) ------------------------------------------

Tensor layer_norm(const Tensor& x_in, Shape normalized_shape, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  auto [x0, weight, bias] = amp::prepare(amp::Op::LayerNorm, x_in, weight_in, bias_in);
  const int k = normalized_shape.ndim();
  HG_CHECK(k >= 1 && x0.dim() >= k && Shape(x0.shape().end() - k, x0.shape().end()) == normalized_shape,
           "layer_norm: normalized_shape ", normalized_shape, " must match the trailing dimensions of the input ",
           x0.shape());
  HG_CHECK(is_floating(x0.dtype()), "layer_norm: expected a floating input, got ", x0.dtype());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    if (t->defined()) {
      HG_CHECK(t->shape() == normalized_shape, "layer_norm: weight and bias must have shape ", normalized_shape,
               ", got ", t->shape());
      detail::check_same_device("layer_norm", x0, *t);
    }
  const Tensor x = x0.contiguous();
  const int64_t D = checked_numel(normalized_shape, "layer_norm"), rows = D == 0 ? 0 : x.numel() / D;
  kernels::NormStatistics stats;
  Tensor out = kernels::layer_norm_forward(x, weight, bias, rows, D, eps, stats);
  record(amp::Op::LayerNorm, out, {x, weight, bias},
         [sx = SavedTensor(x), sw = SavedTensor(weight), stats = std::move(stats), rows, D,
          normalized_shape, has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           kernels::NormGradients g = kernels::layer_norm_backward(sx.get(), grad.contiguous(), sw.get(), stats, rows, D);
           return {g.dx, sw.defined() ? g.dw.reshape(normalized_shape) : Tensor(),
                   has_b ? g.db.reshape(normalized_shape) : Tensor()};
         });
  return out;
}

// ---- rms_norm: composed ------------------------------------------------------------------------------

namespace {
// PyTorch's default eps: the dtype's machine epsilon.
double machine_epsilon(DType dtype) {
  switch (dtype) {
    case f64: return std::numeric_limits<double>::epsilon();
    case f16: return 0.0009765625;  // 2^-10
    case bf16: return 0.0078125;    // 2^-7
    default: return std::numeric_limits<float>::epsilon();
  }
}
}  // namespace

Tensor rms_norm(const Tensor& x_in, Shape normalized_shape, const Tensor& weight_in, std::optional<double> eps) {
  auto [x, weight] = amp::prepare(amp::Op::RmsNorm, x_in, weight_in);
  const int k = normalized_shape.ndim();
  HG_CHECK(k >= 1 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           "rms_norm: normalized_shape ", normalized_shape, " must match the trailing dimensions of the input ",
           x.shape());
  HG_CHECK(is_floating(x.dtype()), "rms_norm: expected a floating input, got ", x.dtype());
  if (weight.defined()) {
    HG_CHECK(weight.shape() == normalized_shape, "rms_norm: weight must have shape ", normalized_shape, ", got ",
             weight.shape());
    detail::check_same_device("rms_norm", x, weight);
  }
  // 16-bit inputs are computed in f32, weight included, and rounded once. (PyTorch's composite
  // rounds to the input's dtype before the weight, a second rounding; the results differ by at
  // most an ulp.) The result has the promoted dtype of input and weight, as PyTorch's.
  const DType compute = x.dtype() == f64 ? f64 : f32;
  const Tensor xc = x.to(compute);
  Shape dims;
  for (int d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor out = xc / sqrt(mean(xc * xc, dims, true) + eps.value_or(machine_epsilon(x.dtype())));
  if (weight.defined()) out = out * weight.to(compute);
  return out.to(weight.defined() ? promote_types(x.dtype(), weight.dtype()) : x.dtype());
}

// ---- group_norm and instance_norm: groups are (image, channel group) rows -------------------------

namespace {

void check_per_channel(std::string_view name, const Tensor& x, std::initializer_list<const Tensor*> tensors) {
  const int64_t C = x.shape()[1];
  for (const Tensor* t : tensors)
    if (t->defined()) {
      HG_CHECK(t->dim() == 1 && t->shape()[0] == C, name, ": expected per-channel tensors of shape [", C, "], got ",
               t->shape());
      detail::check_same_device(name, x, *t);
    }
}

// The normalisation over (image, group) rows with its autograd node, recorded as `op`.
Tensor grouped_norm(amp::Op op, const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, double eps,
                    kernels::NormStatistics& stats) {
  Tensor out = kernels::group_norm_forward(x, weight, bias, groups, eps, stats);
  record(op, out, {x, weight, bias},
         [sx = SavedTensor(x), sw = SavedTensor(weight), stats, groups, eps,
          has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           kernels::NormGradients g = kernels::group_norm_backward(sx.get(), grad.contiguous(), sw.get(), stats, groups, eps);
           return {g.dx, sw.defined() ? g.dw : Tensor(), has_b ? g.db : Tensor()};
         });
  return out;
}

}  // namespace

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const std::string_view name = amp::op_name(amp::Op::GroupNorm);
  auto [x0, weight, bias] = amp::prepare(amp::Op::GroupNorm, x_in, weight_in, bias_in);
  HG_CHECK(x0.dim() >= 2, name, ": input must be (N, C, ...), got ", x0.shape());
  HG_CHECK(is_floating(x0.dtype()), name, ": expected a floating input, got ", x0.dtype());
  const int64_t C = x0.shape()[1];
  HG_CHECK(num_groups >= 1 && C % num_groups == 0, name, ": num_groups (", num_groups,
           ") must be >= 1 and divide the channels (", C, ")");
  check_per_channel(name, x0, {&weight, &bias});
  kernels::NormStatistics stats;
  return grouped_norm(amp::Op::GroupNorm, x0.contiguous(), weight, bias, num_groups, eps, stats);
}

Tensor instance_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                     const Tensor& bias_in, bool use_input_stats, double momentum, double eps) {
  const std::string_view name = amp::op_name(amp::Op::InstanceNorm);
  auto [x0, weight, bias] = amp::prepare(amp::Op::InstanceNorm, x_in, weight_in, bias_in);
  HG_CHECK(x0.dim() >= 3, name, ": input must be (N, C, L) or (N, C, H, W, ...), got ", x0.shape());
  HG_CHECK(is_floating(x0.dtype()), name, ": expected a floating input, got ", x0.dtype());
  check_per_channel(name, x0, {&running_mean, &running_var, &weight, &bias});
  HG_CHECK(running_mean.defined() == running_var.defined(), name,
           ": running_mean and running_var go together (one is undefined)");
  const Tensor x = x0.contiguous();
  const int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t S = 1;  // values per (image, channel)
  for (int d = 2; d < x.dim(); ++d) S *= x.shape()[d];
  if (!use_input_stats) {  // the running statistics: batch_norm's evaluation mode, per channel
    HG_CHECK(running_mean.defined(), name, ": use_input_stats = false needs running_mean and running_var");
    kernels::NormStatistics stats;
    Tensor out = kernels::batch_norm_forward(x, running_mean, running_var, weight, bias, false, momentum, eps, stats);
    record(amp::Op::InstanceNorm, out, {x, weight, bias},
           [sx = SavedTensor(x), sw = SavedTensor(weight), stats = std::move(stats),
            has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
             kernels::NormGradients g = kernels::batch_norm_backward(sx.get(), grad.contiguous(), sw.get(), stats, false);
             return {g.dx, sw.defined() ? g.dw : Tensor(), has_b ? g.db : Tensor()};
           });
    return out;
  }
  HG_CHECK(S > 1 || x.numel() == 0, name, ": expected more than 1 value per channel, got input ", x.shape());
  kernels::NormStatistics stats;
  // One group per channel: a (image, channel) row each.
  Tensor out = grouped_norm(amp::Op::InstanceNorm, x, weight, bias, C, eps, stats);
  if (running_mean.defined() && x.numel() > 0) {
    // The running statistics move toward the batch's mean of the per-instance statistics.
    const std::vector<double> mean = stats.mean_t.defined() ? stats.mean_t.to_vector<double>() : stats.mean;
    const std::vector<double> var = kernels::group_variances(stats, eps);
    std::vector<double> rm = running_mean.to_vector<double>(), rv = running_var.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) {
      double m = 0, v = 0;
      for (int64_t n = 0; n < N; ++n) m += mean[size_t(n * C + c)], v += var[size_t(n * C + c)];
      rm[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * m / double(N);
      rv[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * v / double(N) * double(S) / double(S - 1);
    }
    for (auto [running, values] : {std::pair{&running_mean, &rm}, std::pair{&running_var, &rv}}) {
      detail::copy_into(*running, from_vector(*values, {C}, {.dtype = running->dtype(), .device = running->device()}));
      running->impl()->storage->bump_version();
    }
  }
  return out;
}

}  // namespace hg
