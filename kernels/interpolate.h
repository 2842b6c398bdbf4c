// interpolate's kernels (ops/interpolate.cpp) on a contiguous NCHW tensor, on its device, forward
// and backward, by the index math of kernels/math/interpolate.h. They record nothing.
#pragma once
#include "core/tensor.h"
#include "kernels/math/interpolate.h"

namespace hg::kernels {

Tensor interpolate(const Tensor& x, const math::Resize& r);
Tensor interpolate_backward(const Tensor& grad, const Shape& x_shape, const math::Resize& r);

}  // namespace hg::kernels
