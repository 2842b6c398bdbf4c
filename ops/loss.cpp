// cross_entropy (fused log-softmax + negative log-likelihood with label smoothing) and mse_loss.
//
// Checks, autocast, the kernels of kernels/cross_entropy.h (row formulas shared by CPU and CUDA in
// kernels/math/cross_entropy.h) and one autograd node. The batch loss is the mean over rows whose
// target is not ignore_index.
#include "ops/loss.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/record.h"

namespace hg {


// ---- cross_entropy ----------------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, CrossEntropyOptions options) {
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

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = amp::prepare(amp::Op::MseLoss, a_in, b_in);
  HG_CHECK(a.shape() == b.shape(), "mse_loss: input shape ", a.shape(), " and target shape ", b.shape(),
           " differ (mse_loss does not broadcast)");
  HG_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), "mse_loss: expected floating tensors, got ", a.dtype(),
           " and ", b.dtype());
  return mean(pow(a - b, 2.0));  // composed of differentiable ops: no kernel, no backward to write
}

}  // namespace hg
