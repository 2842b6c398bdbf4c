// Convolutions. conv2d: 2-D convolution on NCHW tensors: x (N, C, H, W), weight (O, C / groups, kh, kw), optional
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

// conv1d: x (N, C, L), weight (O, C / groups, k), bias (O); output length
// (L + 2 * padding - dilation * (k - 1) - 1) / stride + 1. It runs as a conv2d of height 1.
struct Conv1dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv1dFuncOptions options = {});

// conv_transpose2d (a "deconvolution"): the gradient of conv2d with respect to its input, used as
// a layer that upsamples. x (N, C, H, W), weight (C, O / groups, kh, kw) -- the layout of the
// conv2d it transposes --, bias (O). Output size per side:
// (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1, as PyTorch;
// output_padding (< stride or < dilation) picks one of the sizes a strided conv2d maps to H.
struct ConvTranspose2dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t groups = 1;
  int64_t dilation = 1;
};
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        ConvTranspose2dFuncOptions options = {});

}  // namespace hg
