// 2-D convolution on NCHW tensors: x (N, C, H, W), weight (O, C, kh, kw), optional bias (O).
// CPU: im2col + the GEMM of ops/linalg.h per image (images in parallel): 16-bit inputs multiply
// in f32, or natively as bf16 pairs with AVX512-BF16, accumulate in f32 and round once. CUDA: cuDNN.
// (The module's options are nn::Conv2dOptions, nn/conv.h; these are the function's.)
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/epilogue.h"

namespace hg {

struct Conv2dFuncOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  Epilogue epilogue = Epilogue::None;  // Relu: relu(conv2d(...)) in one op (ops/epilogue.h)
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dFuncOptions options = {});

}  // namespace hg
