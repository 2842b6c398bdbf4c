// batch_norm and layer_norm: checks, autocast, the kernels of kernels/norm.h and one autograd node
// each, the same on every device.
#include "ops/norm.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/norm.h"
#include "ops/elementwise.h"  // check_same_device
#include "ops/record.h"

namespace hg {


Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
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
  const Tensor x = x0.contiguous();
  if (C == 0) return empty(x.shape(), x.options());  // no channels: nothing to normalise
  HG_CHECK(!training || x.numel() / C > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
           x.shape());
  kernels::NormStatistics stats;
  Tensor out = kernels::batch_norm_forward(x, running_mean, running_var, weight, bias, training, momentum, eps, stats);
  record(amp::Op::BatchNorm, out, {x, weight, bias},
         [sx = SavedTensor(x), sw = SavedTensor(weight), stats = std::move(stats), training,
          has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           kernels::NormGradients g = kernels::batch_norm_backward(sx.get(), grad.contiguous(), sw.get(), stats, training);
           return {g.dx, sw.defined() ? g.dw : Tensor(), has_b ? g.db : Tensor()};
         });
  return out;
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

}  // namespace hg
