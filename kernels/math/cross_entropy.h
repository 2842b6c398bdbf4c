// cross_entropy's per-row formulas (fused log-softmax + negative log-likelihood with label
// smoothing), the one definition the CPU loops (kernels/cross_entropy.cpp) and the CUDA kernels
// (kernels/cuda/loss.cu) both run. For a row x of C logits with target t and smoothing eps:
//   lse  = max + log sum exp(x - max)                       (max-subtracted: exp() <= 1)
//   loss = (1 - eps) * (lse - x[t]) + eps * (lse - mean(x))
//   dloss/dx[c] = exp(x[c] - lse) - ((1 - eps) * [c == t] + eps / C)
// Computed in double: a row's loss is summed over a batch and must not lose the small terms.
#pragma once
#include <cstdint>

#include "kernels/math/reduce.h"

namespace hg::kernels::math {

struct CrossEntropy {
  double smoothing;
  int64_t classes;

  HG_HD static double exp_term(double x, double max) { return std::exp(x - max); }
  HG_HD static double log_sum_exp(double max, double total) { return max + std::log(total); }

  HG_HD double loss(double lse, double x_target, double row_mean) const {
    return (1 - smoothing) * (lse - x_target) + smoothing * (lse - row_mean);
  }
  // The smoothed one-hot target's weight of a class.
  HG_HD double target_weight(bool is_target) const { return (is_target ? 1 - smoothing : 0) + smoothing / double(classes); }
  HG_HD double grad(double x, double lse, bool is_target) const { return std::exp(x - lse) - target_weight(is_target); }
};

}  // namespace hg::kernels::math
