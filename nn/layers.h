// Modules without parameters, thin wrappers over their ops: ReLU, LeakyReLU, Softplus, GELU, Dropout,
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten.
#pragma once
#include "nn/module.h"
#include "ops/pool.h"

namespace hg::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x where x > 0, else negative_slope * x (torch.nn.LeakyReLU).
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& x) override;
  double negative_slope;
};

// log(1 + exp(beta x)) / beta, linear above threshold (torch.nn.Softplus).
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& x) override;
  double beta, threshold;
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// Zeroes elements with probability p in training mode; the identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int kernel_size, int stride = 0);  // stride 0 means stride = kernel_size
  // With padding or ceil_mode: nn::MaxPool2d({.kernel = 3, .stride = 2, .padding = 1}).
  explicit MaxPool2d(MaxPool2dFuncOptions options);
  Tensor forward(const Tensor& x) override;
  MaxPool2dFuncOptions options;
  int kernel_size, stride;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int kernel_size, int stride = 0);  // stride 0 means stride = kernel_size
  explicit AvgPool2d(AvgPool2dFuncOptions options);
  Tensor forward(const Tensor& x) override;
  AvgPool2dFuncOptions options;
  int kernel_size, stride;
};

// adaptive_avg_pool2d to a fixed output size: AdaptiveAvgPool2d({1, 1}) is global average pooling.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Shape output_size);
  Tensor forward(const Tensor& x) override;
  Shape output_size;
};

// Flattens dims start_dim..end_dim (default: everything but the batch dimension).
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1);
  Tensor forward(const Tensor& x) override;
  int start_dim, end_dim;
};

}  // namespace hg::nn
