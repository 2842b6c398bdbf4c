// 2-D convolution on NCHW tensors: x (N, C, H, W), weight (O, C, kh, kw), optional bias (O).
// CPU: im2col + GEMM per image (images in parallel); 16-bit inputs are computed in f32.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});

// relu(conv2d(...)) as one op: the activation is applied while each image's output is still in
// cache, and its derivative while the gradient is gathered. nn::Sequential uses it for a
// Conv2d followed by ReLU.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});

}  // namespace hg
