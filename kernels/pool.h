// The pooling kernels of ops/pool.cpp, on the input's device: x is contiguous NCHW, floating,
// and the geometry is valid (the op checks it: kernel <= 16, padding <= kernel / 2, at least one
// output). They record nothing.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/math/pool.h"

namespace hg::kernels {

struct MaxPoolResult {
  Tensor out;    // the maxima, (N, C, OH, OW)
  Tensor where;  // u8, the window index (row-major, padding included) of each maximum, for the backward
                 // (adaptive_max_pool2d: i64 plane indices)
};

MaxPoolResult max_pool2d(const Tensor& x, const math::PoolGeometry& g);
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& where, const Shape& x_shape, const math::PoolGeometry& g);
Tensor avg_pool2d(const Tensor& x, const math::PoolGeometry& g);
Tensor avg_pool2d_backward(const Tensor& grad, const Shape& x_shape, const math::PoolGeometry& g);

// The mean of each of OH x OW bins that tile the input (math::adaptive_begin/end).
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t OH, int64_t OW);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& x_shape);

// The maximum of each bin; `where` holds its i64 index in the plane (h * W + w), as PyTorch's
// indices (a bin may span the whole plane, too many positions for max_pool2d's u8).
MaxPoolResult adaptive_max_pool2d(const Tensor& x, int64_t OH, int64_t OW);
Tensor adaptive_max_pool2d_backward(const Tensor& grad, const Tensor& where, const Shape& x_shape);

}  // namespace hg::kernels
