// Normalisation layers' ops. Statistics are always computed in f32 (or f64 for f64 inputs),
// whatever the input dtype; the output keeps the input's dtype.
//
// batch_norm: x (N, C, ...) normalised per channel C. training = true uses the batch's mean and
//   (biased) variance and updates running_mean/var in place with `momentum` (the unbiased
//   variance, as PyTorch does); training = false uses the running statistics. running stats,
//   weight and bias may be undefined.
// layer_norm: normalises over the trailing `normalized_shape` dimensions.
// rms_norm: x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape` dimensions
//   (no centring, no bias; Zhang and Sennrich 2019). eps defaults to the dtype's epsilon, as
//   PyTorch's. Composed of elementwise ops and a mean, computed in f32 for 16-bit inputs.
// group_norm: x (N, C, ...) split into `num_groups` groups of C / num_groups channels, each
//   normalised over its channels and positions, per image; weight and bias (C) per channel.
// instance_norm: group_norm with one channel per group. With use_input_stats (the default) it
//   normalises each image's channels by their own statistics, and updates running_mean/var (if
//   given) with their mean over the batch (unbiased variance, as PyTorch); without, it uses the
//   running statistics like batch_norm in evaluation.
#pragma once
#include <optional>

#include "core/tensor.h"
#include "ops/epilogue.h"

namespace hg {

// epilogue = Epilogue::Relu gives relu(batch_norm(...)) in one pass over the activations
// (Epilogue::Relu6: relu6(batch_norm(...)), MobileNetV2's pair), its result
// and gradients equal to the pair's bit for bit, NaN included (ops/epilogue.h); the op is still
// batch_norm for autocast and the PrecisionReport. A defined `residual` (x's shape) is added
// before the epilogue: relu(batch_norm(...) + residual), a ResNet block's end, in the same pass
// and bit for bit equal to the composition too (composed where the add would promote dtypes).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps,
                  Epilogue epilogue = Epilogue::None, const Tensor& residual = {});
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight, const Tensor& bias, double eps);
Tensor rms_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {}, const Tensor& running_var = {},
                     const Tensor& weight = {}, const Tensor& bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

}  // namespace hg
