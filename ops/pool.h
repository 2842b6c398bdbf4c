// 2-D pooling on NCHW tensors without padding: out = floor((H - kernel) / stride) + 1.
// max_pool2d propagates NaN; avg_pool2d averages the full window.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

Tensor max_pool2d(const Tensor& x, int kernel, int stride);
Tensor avg_pool2d(const Tensor& x, int kernel, int stride);
// stride = kernel: non-overlapping windows, PyTorch's default.
inline Tensor max_pool2d(const Tensor& x, int kernel) { return max_pool2d(x, kernel, kernel); }
inline Tensor avg_pool2d(const Tensor& x, int kernel) { return avg_pool2d(x, kernel, kernel); }

}  // namespace hg
