// Normalisation layers' ops. Statistics are always computed in f32 (or f64 for f64 inputs),
// whatever the input dtype; the output keeps the input's dtype.
//
// batch_norm: x (N, C, ...) normalised per channel C. training = true uses the batch's mean and
//   (biased) variance and updates running_mean/var in place with `momentum` (the unbiased
//   variance, as PyTorch does); training = false uses the running statistics. running stats,
//   weight and bias may be undefined.
// layer_norm: normalises over the trailing `normalized_shape` dimensions.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps);
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace hg
