// 2-D convolution on NCHW tensors: x (N, C, H, W), weight (O, C, kh, kw), optional bias (O).
// CPU: im2col + GEMM per image (images in parallel); 16-bit inputs are computed in f32.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/epilogue.h"

namespace hg {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  Epilogue epilogue = Epilogue::None;  // Relu: relu(conv2d(...)) in one op (ops/epilogue.h)
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Conv2dOptions options = {});

}  // namespace hg
