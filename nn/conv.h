// The convolution modules, initialised like PyTorch (weight: kaiming_uniform with a = sqrt(5);
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))):
//   Conv2d           NCHW input, weight (out, in / groups, k, k)
//   Conv1d           NCL input, weight (out, in / groups, k)
//   ConvTranspose2d  NCHW input, weight (in, out / groups, k, k): upsamples by its stride
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

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Tensor weight;  // (out_channels, in_channels / groups, kernel_size)
  Tensor bias;    // (out_channels), undefined without bias
};

// Fields in torch.nn.ConvTranspose2d's order.
struct ConvTranspose2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  int64_t dilation = 1;
};

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t in_channels, out_channels, kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight;  // (in_channels, out_channels / groups, kernel_size, kernel_size)
  Tensor bias;    // (out_channels), undefined without bias
};

}  // namespace hg::nn
