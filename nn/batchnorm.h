// nn::BatchNorm2d: per-channel normalisation of (N, C, H, W) input with learnable weight (ones)
// and bias (zeros), and running statistics updated in training mode and used in eval mode.
// Buffers: running_mean, running_var, num_batches_tracked (PyTorch's state-dict names).
#pragma once
#include "nn/module.h"

namespace hg::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                   // (C), undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () i64
};

}  // namespace hg::nn
