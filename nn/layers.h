// Modules without parameters, thin wrappers over their ops: Dropout, MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, AdaptiveMaxPool2d, Upsample, Flatten. (The activations' modules: nn/activation.h, included here.)
#pragma once
#include "nn/activation.h"
#include "nn/module.h"
#include "ops/interpolate.h"
#include "ops/pool.h"

namespace hg::nn {

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

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Shape output_size);
  Tensor forward(const Tensor& x) override;
  Shape output_size;
};

// interpolate with fixed options (torch.nn.Upsample):
//   nn::Upsample({.scale_factor = 2.0, .mode = "bilinear"})
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options);
  Tensor forward(const Tensor& x) override;
  InterpolateOptions options;
};

// Flattens dims start_dim..end_dim (default: everything but the batch dimension).
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1);
  Tensor forward(const Tensor& x) override;
  int start_dim, end_dim;
};

}  // namespace hg::nn
