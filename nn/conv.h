// nn::Conv2d: 2-D convolution on NCHW input, weight (out, in / groups, k, k) initialised like PyTorch
// (kaiming_uniform with a = sqrt(5); bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
#pragma once
#include "nn/module.h"

namespace hg::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;  // in_channels == out_channels == groups: depthwise
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions options;
  Tensor weight;  // (out_channels, in_channels / groups, kernel_size, kernel_size)
  Tensor bias;    // (out_channels), undefined without bias
};

}  // namespace hg::nn
