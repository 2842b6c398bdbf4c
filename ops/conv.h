// 2-D convolution on NCHW tensors: x (N, C, H, W), weight (O, C / groups, kh, kw), optional
// bias (O). Taps `dilation` apart; `groups` splits the channels into independent convolutions
// (groups == C with weight (C * m, 1, kh, kw) is a depthwise convolution). Output size per side:
// (H + 2 * padding - dilation * (kh - 1) - 1) / stride + 1, as PyTorch.
// CPU: im2col + the GEMM of ops/linalg.h per image and group (images in parallel): 16-bit inputs
// multiply in f32, or natively as bf16 pairs with AVX512-BF16, accumulate in f32 and round once;
// depthwise convolutions run a direct kernel (kernels/cpu/depthwise_conv.h). CUDA: cuDNN.
// (The module's options are nn::Conv2dOptions, nn/conv.h; these are the function's.)
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/epilogue.h"

namespace hg {

struct Conv2dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  Epilogue epilogue = Epilogue::None;  // Relu: relu(conv2d(...)) in one op (ops/epilogue.h)
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dFuncOptions options = {});

}  // namespace hg
