// The losses. cross_entropy's common case is one fused kernel (kernels/cross_entropy.h, row
// formulas shared by CPU and CUDA in kernels/math/cross_entropy.h) and one autograd node; the
// other losses are composed of ops (so they run on every device and get their gradients for free),
// each running in f32 under autocast (its op-table row).
#include "ops/loss.h"

#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cross_entropy.h"
#include "ops/activation.h"
#include "ops/embedding.h"
#include "ops/compare.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/record.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace hg {

namespace {

// The loss's reduction of its per-element values, returned in `dtype`.
// NOTE: a composed loss computes in f32 for 16-bit inputs (PyTorch's kernels compute 16-bit
// losses in float too): the input is widened once, and the loss rounded once at the end, instead
// of after every op of the composition.
Tensor reduce_loss(const Tensor& per_element, const std::string& reduction, std::string_view op, DType dtype) {
  Tensor out;
  if (reduction == "none") out = per_element;
  else if (reduction == "sum") out = sum(per_element);
  else if (reduction == "mean") out = mean(per_element);
  else HG_FAIL(op, ": reduction must be \"mean\", \"sum\" or \"none\", got ", quoted(reduction));
  return out.dtype() == dtype ? out : out.to(dtype);
}

Tensor widened(const Tensor& t) { return t.dtype() == compute_dtype(t.dtype()) ? t : t.to(compute_dtype(t.dtype())); }

void check_pair(std::string_view op, const Tensor& input, const Tensor& target) {
  HG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op, ": expected floating input and target, got ",
           input.dtype(), " and ", target.dtype());
  HG_CHECK(input.shape() == target.shape(), op, ": input shape ", input.shape(), " and target shape ", target.shape(),
           " differ (", op, " does not broadcast)");
  detail::check_same_device(op, input, target);
}

// (N, C, d1, ...) -> (N * d1 * ..., C), classes last; targets (N, d1, ...) -> (N * d1 * ...).
struct Rows {
  Tensor x, targets;
  Shape per_sample;  // the targets' shape: what reduction "none" returns
};
Rows as_rows(std::string_view op, const Tensor& x, const Tensor& targets) {
  HG_CHECK(x.dim() >= 2, op, ": expected input of shape (N, C) or (N, C, d1, ...), got ", x.shape());
  HG_CHECK(targets.dtype() == i64, op, ": targets must be i64 class indices, got ", targets.dtype());
  Shape expected = {x.shape()[0]};
  for (int d = 2; d < x.dim(); ++d) expected.push_back(x.shape()[d]);
  HG_CHECK(targets.shape() == expected, op, ": expected targets of shape ", expected, " for input ", x.shape(), ", got ",
           targets.shape());
  detail::check_same_device(op, x, targets);
  if (x.dim() == 2) return {x, targets, expected};
  Shape order = {0};
  for (int d = 2; d < x.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return {x.permute(order).reshape({targets.numel(), x.shape()[1]}), targets.reshape({targets.numel()}), expected};
}

}  // namespace


// ---- cross_entropy ----------------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, CrossEntropyOptions options) {
  const bool fused = logits_in.dim() == 2 && options.reduction == "mean" && !options.weight.defined();
  if (!fused) {  // composed: (N, C, d...) inputs, a class weight, another reduction
    auto [logits] = amp::prepare(amp::Op::CrossEntropy, logits_in);
    HG_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating, got ", logits.dtype());
    HG_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
             "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
    HG_CHECK(options.label_smoothing == 0 || !options.weight.defined(), "cross_entropy: label_smoothing with a class "
             "weight is not supported (use one or the other)");
    const Rows rows = as_rows("cross_entropy", widened(logits), targets);
    const Tensor logp = log_softmax(rows.x, 1);
    const DType dtype = logits.dtype();
    if (options.label_smoothing == 0) {
      const Tensor loss = nll_loss(logp, rows.targets, {.weight = options.weight, .ignore_index = options.ignore_index,
                                                        .reduction = options.reduction});
      return (options.reduction == "none" ? loss.reshape(rows.per_sample) : loss).to(dtype);
    }
    // PyTorch's smoothing: (1 - eps) nll + eps * mean over classes of -log p, on the kept rows.
    const Tensor kept = 1.0 - eq(rows.targets, full({}, double(options.ignore_index), {.dtype = i64})).to(logp.dtype());
    const Tensor per = nll_loss(logp, rows.targets, {.ignore_index = options.ignore_index, .reduction = "none"}) *
                           (1.0 - options.label_smoothing) -
                       where(kept, mean(logp, {1}), zeros({}, kept.options())) * options.label_smoothing;
    if (options.reduction == "mean") return (sum(per) / sum(kept)).to(dtype);
    return reduce_loss(per.reshape(rows.per_sample), options.reduction, "cross_entropy", dtype);
  }
  auto [logits0] = amp::prepare(amp::Op::CrossEntropy, logits_in);
  HG_CHECK(logits0.dim() == 2, "cross_entropy: logits must be 2-D (N, C), got ", logits0.shape());
  HG_CHECK(is_floating(logits0.dtype()), "cross_entropy: logits must be floating, got ", logits0.dtype());
  HG_CHECK(targets.dtype() == i64, "cross_entropy: targets must be i64 class indices, got ", targets.dtype());
  HG_CHECK(targets.dim() == 1 && targets.shape()[0] == logits0.shape()[0], "cross_entropy: expected targets of shape [",
           logits0.shape()[0], "] for logits ", logits0.shape(), ", got ", targets.shape());
  HG_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  detail::check_same_device("cross_entropy", logits0, targets);
  const Tensor logits = logits0.contiguous(), t = targets.contiguous();

  const kernels::CrossEntropyResult r = kernels::cross_entropy(logits, t, options.label_smoothing, options.ignore_index);
  Tensor out = r.loss;
  record(amp::Op::CrossEntropy, out, {logits},
         [sl = SavedTensor(logits), st = SavedTensor(t), options,
          rows = r.rows](const Tensor& g) -> std::vector<Tensor> {
           return {kernels::cross_entropy_backward(sl.get(), st.get(), g, options.label_smoothing, options.ignore_index,
                                                   rows)};
         });
  return out;
}

// ---- mse_loss -------------------------------------------------------------------------------------

// ---- nll_loss ----------------------------------------------------------------------------------------

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options) {
  auto [logp0] = amp::prepare(amp::Op::NllLoss, log_probs);
  HG_CHECK(is_floating(logp0.dtype()), "nll_loss: expected floating log-probabilities, got ", logp0.dtype());
  const Rows rows = as_rows("nll_loss", widened(logp0), targets);
  const int64_t R = rows.x.shape()[0], C = rows.x.shape()[1];
  if (options.weight.defined())
    HG_CHECK(options.weight.dim() == 1 && options.weight.shape()[0] == C, "nll_loss: weight must have shape [", C,
             "], got ", options.weight.shape());
  // Read on the host (scenario 12: a target outside [0, C) is an error, whatever the reduction;
  // on a GPU this waits for the targets).
  const std::vector<int64_t> t = rows.targets.to(Device::cpu()).contiguous().to_vector<int64_t>();
  std::vector<int64_t> at(static_cast<size_t>(R)), cls(static_cast<size_t>(R));  // flat (row, target) positions; the targets
  std::vector<double> kept(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t target = t[size_t(r)];
    const bool ignored = target == options.ignore_index;
    HG_CHECK(ignored || (target >= 0 && target < C), "nll_loss: Target ", target, " is out of bounds (", C,
             " classes; ignore_index ", options.ignore_index, ")");
    cls[size_t(r)] = ignored ? 0 : target;  // (an ignored row reads class 0, then counts 0)
    at[size_t(r)] = r * C + cls[size_t(r)];
    kept[size_t(r)] = ignored ? 0.0 : 1.0;
  }
  const Tensor keep = from_vector(kept, {R}, {.dtype = rows.x.dtype(), .device = rows.x.device()});
  // The target's log-probability of each row: a gather, as PyTorch's (a one-hot mask times the
  // row would turn a -inf elsewhere in the row into NaN); embedding's backward scatters it back.
  const Tensor picked = embedding(from_vector(at, {R}, {.dtype = i64, .device = rows.x.device()}),
                                  rows.x.reshape({R * C, 1}))
                            .reshape({R});
  Tensor weight_of_row = keep;
  if (options.weight.defined()) {
    const Tensor classes = from_vector(cls, {R}, {.dtype = i64, .device = rows.x.device()});
    weight_of_row = embedding(classes, options.weight.detach().to(rows.x.dtype()).reshape({C, 1})).reshape({R}) * keep;
  }
  // An ignored row is 0 by choice (where), not by multiplying a value that may be -inf.
  const Tensor per = where(keep, -picked * weight_of_row, zeros({}, {.dtype = rows.x.dtype(), .device = rows.x.device()}));
  if (options.reduction == "mean")  // NaN when nothing counts, as PyTorch
    return (sum(per) / sum(weight_of_row)).to(logp0.dtype());
  return reduce_loss(per.reshape(rows.per_sample), options.reduction, "nll_loss", logp0.dtype());
}

// ---- regression losses -----------------------------------------------------------------------

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, L1LossOptions options) {
  auto [input, target] = amp::prepare(amp::Op::L1Loss, input_in, target_in);
  check_pair("l1_loss", input, target);
  return reduce_loss(abs(widened(input) - widened(target)), options.reduction, "l1_loss", input.dtype());
}

namespace {
// 0.5 q^2 + width * (d - q) with q = min(d, width), d = |input - target|: the quadratic part
// below `width`, linear above it -- one composition for huber and smooth_l1 (which divides by beta).
Tensor quadratic_then_linear(const Tensor& input, const Tensor& target, double width) {
  const Tensor d = abs(input - target);
  const Tensor q = clamp(d, 0.0, width);
  return q * q * 0.5 + (d - q) * width;
}
}  // namespace

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, SmoothL1LossOptions options) {
  auto [input, target] = amp::prepare(amp::Op::SmoothL1Loss, input_in, target_in);
  check_pair("smooth_l1_loss", input, target);
  HG_CHECK(options.beta >= 0 && std::isfinite(options.beta), "smooth_l1_loss: beta must be finite and >= 0, got ",
           options.beta);
  const Tensor a = widened(input), b = widened(target);
  if (options.beta == 0) return reduce_loss(abs(a - b), options.reduction, "smooth_l1_loss", input.dtype());
  return reduce_loss(quadratic_then_linear(a, b, options.beta) / options.beta, options.reduction, "smooth_l1_loss",
                     input.dtype());
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, HuberLossOptions options) {
  auto [input, target] = amp::prepare(amp::Op::HuberLoss, input_in, target_in);
  check_pair("huber_loss", input, target);
  HG_CHECK(options.delta > 0 && std::isfinite(options.delta), "huber_loss: delta must be positive, got ", options.delta);
  return reduce_loss(quadratic_then_linear(widened(input), widened(target), options.delta), options.reduction,
                     "huber_loss", input.dtype());
}

// ---- binary cross-entropy ----------------------------------------------------------------------

Tensor binary_cross_entropy(const Tensor& p_in, const Tensor& y_in, BCELossOptions options) {
  auto [p16, y16] = amp::prepare(amp::Op::BinaryCrossEntropy, p_in, y_in);
  check_pair("binary_cross_entropy", p16, y16);
  const Tensor p = widened(p16), y = widened(y16);
  // NOTE: PyTorch clamps each log at -100, so p = 0 or 1 gives a large finite loss, not inf.
  Tensor per = -(y * clamp(log(p), -100.0, 0.0) + (1.0 - y) * clamp(log(1.0 - p), -100.0, 0.0));
  if (options.weight.defined()) per = per * options.weight.to(per.dtype());
  return reduce_loss(per, options.reduction, "binary_cross_entropy", p16.dtype());
}

Tensor binary_cross_entropy_with_logits(const Tensor& x_in, const Tensor& y_in, BCEWithLogitsLossOptions options) {
  auto [x16, y16] = amp::prepare(amp::Op::BinaryCrossEntropyWithLogits, x_in, y_in);
  check_pair("binary_cross_entropy_with_logits", x16, y16);
  const Tensor x = widened(x16), y = widened(y16);
  // PyTorch's stable form: (1 - y) x + (1 + (pos_weight - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)).
  const Tensor softplus_neg = log(exp(-abs(x)) + 1.0) + relu(-x);  // log(1 + exp(-x)), no overflow
  Tensor per;
  if (options.pos_weight.defined()) {
    const Tensor log_weight = (options.pos_weight.to(x.dtype()) - 1.0) * y + 1.0;
    per = (1.0 - y) * x + log_weight * softplus_neg;
  } else {
    per = (1.0 - y) * x + softplus_neg;
  }
  if (options.weight.defined()) per = per * options.weight.to(per.dtype());
  return reduce_loss(per, options.reduction, "binary_cross_entropy_with_logits", x16.dtype());
}

// ---- kl_div ------------------------------------------------------------------------------------

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, KLDivLossOptions options) {
  auto [input16, target16] = amp::prepare(amp::Op::KlDiv, input_in, target_in);
  check_pair("kl_div", input16, target16);
  const Tensor input = widened(input16), target = widened(target16);
  Tensor per;
  if (options.log_target) {
    per = exp(target) * (target - input);
  } else {
    // target * log(target), 0 where target is 0 (xlogy): log of 1 there instead of log 0.
    const Tensor zero = eq(target.detach(), zeros({}, {.dtype = target.dtype(), .device = target.device()}));
    per = target * log(target + zero.to(target.dtype())) - target * input;
  }
  if (options.reduction == "batchmean") {
    HG_CHECK(input.dim() >= 1, "kl_div: batchmean needs a batch dimension, got shape ", input.shape());
    return (sum(per) / double(input.shape()[0])).to(input16.dtype());
  }
  return reduce_loss(per, options.reduction, "kl_div", input16.dtype());
}

// ---- mse_loss -------------------------------------------------------------------------------------

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in, MSELossOptions options) {
  auto [a, b] = amp::prepare(amp::Op::MseLoss, a_in, b_in);
  HG_CHECK(a.shape() == b.shape(), "mse_loss: input shape ", a.shape(), " and target shape ", b.shape(),
           " differ (mse_loss does not broadcast)");
  HG_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), "mse_loss: expected floating tensors, got ", a.dtype(),
           " and ", b.dtype());
  // Composed of differentiable ops: no kernel, no backward to write.
  return reduce_loss(pow(widened(a) - widened(b), 2.0), options.reduction, "mse_loss", a.dtype());
}

}  // namespace hg
