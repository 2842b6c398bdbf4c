// The pooling kernels (no padding) of ops/pool.cpp, on the input's device: x is contiguous NCHW,
// floating, and at least one window large (the op checks it). They record nothing.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::kernels {

struct MaxPoolResult {
  Tensor out;    // the maxima, (N, C, OH, OW)
  Tensor where;  // u8, the window index (row-major) of each maximum, for the backward
};

MaxPoolResult max_pool2d(const Tensor& x, int kernel, int stride);
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& where, const Shape& x_shape, int kernel, int stride);
Tensor avg_pool2d(const Tensor& x, int kernel, int stride);
Tensor avg_pool2d_backward(const Tensor& grad, const Shape& x_shape, int kernel, int stride);

}  // namespace hg::kernels
