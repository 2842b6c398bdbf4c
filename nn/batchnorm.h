// nn::BatchNorm2d and nn::BatchNorm1d: per-channel normalisation of (N, C, H, W) input -- or
// (N, C) / (N, C, L) for BatchNorm1d -- with learnable weight (ones) and bias (zeros), and running
// statistics updated in training mode and used in eval mode. Buffers: running_mean, running_var,
// num_batches_tracked (PyTorch's state-dict names).
#pragma once
#include "nn/module.h"
#include "ops/epilogue.h"

namespace hg::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

// What both share; the subclasses check the input's rank.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // forward(x, Epilogue::Relu) == relu(forward(x)) in one pass (hg::batch_norm's epilogue,
  // ops/epilogue.h): what nn::fuse runs for a BatchNorm -> ReLU pair (Epilogue::Relu6 for a
  // BatchNorm -> ReLU6 pair). With a residual (x's shape): relu(forward(x) + residual), a ResNet
  // block's end, also in one pass.
  Tensor forward(const Tensor& x, Epilogue epilogue, const Tensor& residual = {});

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                   // (C), undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () i64

 protected:
  BatchNorm(std::string_view name, int64_t num_features, BatchNormOptions options);
  virtual void check_input(const Tensor& x) const = 0;
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});

 protected:
  void check_input(const Tensor& x) const override;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});

 protected:
  void check_input(const Tensor& x) const override;
};

}  // namespace hg::nn
