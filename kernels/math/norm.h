// batch_norm's and layer_norm's formulas, the one definition the CPU loops (ops/norm.cpp) and the
// CUDA kernels (kernels/cuda/norm.cu) both run, in double. A group of M values (a channel over the
// batch, or a row) is normalised as xhat = (x - mean) * rstd, then y = xhat * w + b. With
// gh = g * w, the training-mode backward is
//   dx = rstd / M * (M * gh - sum(gh) - xhat * sum(gh * xhat)),   dw = sum(g * xhat),   db = sum(g)
#pragma once
#include "kernels/math/common.h"

namespace hg::math {

struct Normalization {
  HG_HD static double rstd(double var, double eps) { return 1.0 / std::sqrt(var + eps); }

  // dx of one value in training mode. batch_norm's w is one per group, so it passes g as gh and
  // w as `scale`; layer_norm's w is per value, so it passes gh = g * w and scale 1.
  HG_HD static double input_grad(double scale, double rstd, double M, double gh, double xhat, double sum_gh,
                                 double sum_gh_xhat) {
    return scale * rstd / M * (M * gh - sum_gh - xhat * sum_gh_xhat);
  }
};

}  // namespace hg::math
