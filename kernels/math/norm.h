// batch_norm's and layer_norm's formulas, the one definition the CPU loops (kernels/norm.cpp) and
// the CUDA kernels (kernels/cuda/norm.cu) both run, in double. A group of M values (a channel over the
// batch, or a row) is normalised as xhat = (x - mean) * rstd, then y = xhat * w + b. With
// gh = g * w, the training-mode backward is
//   dx = rstd / M * (M * gh - sum(gh) - xhat * sum(gh * xhat)),   dw = sum(g * xhat),   db = sum(g)
#pragma once
#include "kernels/math/common.h"

namespace hg::kernels::math {

struct Normalization {
  HG_HD static double rstd(double var, double eps) { return 1.0 / std::sqrt(var + eps); }

  // A running statistic after a training step (PyTorch's rule): the batch's variance goes in
  // unbiased, times count / (count - 1).
  HG_HD static double running_mean(double running, double batch_mean, double momentum) {
    return (1 - momentum) * running + momentum * batch_mean;
  }
  HG_HD static double running_var(double running, double batch_var, double count, double momentum) {
    return (1 - momentum) * running + momentum * batch_var * (count / (count - 1));
  }

  // batch_norm's normalisation and affine folded into one multiply-add per value:
  // y = x * scale + shift, scale = w * rstd, shift = b - mean * scale.
  struct Affine {
    double scale, shift;
  };
  HG_HD static Affine fold(double mean, double rstd, double w, double b) {
    const double scale = w * rstd;
    return {scale, b - mean * scale};
  }

  // The parameter gradients' sums over a group: db = sum(g), dw = sum(g * xhat).
  struct GradientSums {
    double g = 0, g_xhat = 0;
    HG_HD void add(double gv, double xhat) {
      g += gv;
      g_xhat += gv * xhat;
    }
  };

  // dx of one value in training mode. batch_norm's w is one per group, so it passes g as gh and
  // w as `scale`; layer_norm's w is per value, so it passes gh = g * w and scale 1.
  HG_HD static double input_grad(double scale, double rstd, double M, double gh, double xhat, double sum_gh,
                                 double sum_gh_xhat) {
    return scale * rstd / M * (M * gh - sum_gh - xhat * sum_gh_xhat);
  }
};

}  // namespace hg::kernels::math
