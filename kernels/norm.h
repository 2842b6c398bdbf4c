// The normalisation kernels: batch_norm, layer_norm and group_norm, forward and backward, on the input's
// device. The CPU loops run the formulas of kernels/math/norm.h (shared with the CUDA kernels) and
// compute the statistics in double (layer_norm, group_norm: two passes, the mean then squared
// deviations; batch_norm: one pass over memory, blocks merged in double) whatever the input dtype;
// the output keeps the input dtype, so f16 activations stay f16 under autocast.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hg::kernels {

// What a forward keeps for its backward: each group's mean and 1/std -- f64 host vectors on the
// CPU, f32 tensors on a GPU (so training never waits for the device).
struct NormStatistics {
  std::vector<double> mean, rstd;  // CPU
  Tensor mean_t, rstd_t;           // CUDA
};

// dx in x's dtype; dw and db in the weight's dtype (f32 without a weight), flat.
struct NormGradients {
  Tensor dx, dw, db;
  Tensor dresidual;  // batch_norm with a residual: the gradient the residual receives
};

// The activation batch_norm applies in its own pass (ops/norm.cpp maps Epilogue::Relu and
// Epilogue::Relu6 here): relu, or relu6 = hardtanh(0, 6), each by its op's own functor.
enum class NormActivation : uint8_t { None, Relu, Relu6 };

// x contiguous (N, C, ...), per-channel tensors defined or not. Training computes the batch
// statistics and updates the running ones in place (unbiased variance, like PyTorch);
// evaluation reads the running ones. CPU only: a defined `residual` (contiguous, x's shape and
// dtype) is added to the result rounded to x's dtype, and `activation` applies to that, in the
// same pass. The backward takes that output as `activation_output` and passes the gradient where
// the activation did (its own rule, read from the output: relu's y > 0, relu6's 0 < y < 6); with
// `residual` it also returns the residual's gradient.
Tensor batch_norm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                          const Tensor& bias, bool training, double momentum, double eps, NormStatistics& stats,
                          NormActivation activation = NormActivation::None, const Tensor& residual = {});
NormGradients batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  bool training, NormActivation activation = NormActivation::None,
                                  const Tensor& activation_output = {}, bool residual = false);

// x contiguous, viewed as (rows, D); weight and bias hold D values (or are undefined).
Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t D, double eps,
                          NormStatistics& stats);
NormGradients layer_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  int64_t rows, int64_t D);

// x contiguous (N, C, ...), normalised over each of `groups` slices of C / groups channels per
// image (stats per (image, group) row); weight and bias hold C values (or are undefined).
Tensor group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, double eps,
                          NormStatistics& stats);
NormGradients group_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  int64_t groups, double eps);
// Each row's biased variance, from the statistics a forward kept (instance_norm's running stats).
std::vector<double> group_variances(const NormStatistics& stats, double eps);

}  // namespace hg::kernels
