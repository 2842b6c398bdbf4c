// The FP8 versions of linear, matmul and conv2d: what those ops run inside an enabled
// amp::Fp8Autocast (amp/fp8.h's recipes; ops/fp8_ops.cpp).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::amp::detail {
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu);
Tensor fp8_matmul(const Tensor& a, const Tensor& b);
Tensor fp8_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                  int64_t dilation, int64_t groups, bool relu);
}  // namespace hg::amp::detail
