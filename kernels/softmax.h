// The softmax kernels: softmax / log_softmax of a contiguous tensor along one dimension and their
// backward, on the tensor's device. The tensor is viewed as (outer, D, inner) with the softmax
// dimension in the middle; each (outer, inner) line runs the formulas of kernels/math/softmax.h,
// which the CUDA kernels share. The backward is one kernel (not a chain of ops), so 16-bit
// tensors are rounded once, not four times.
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// y = softmax(x) (or log_softmax) along dim (already normalised), x contiguous and floating.
Tensor softmax(const Tensor& x, int dim, bool log);
// dx from the forward's output y and the gradient g (both contiguous, y's shape).
Tensor softmax_backward(const Tensor& y, const Tensor& g, int dim, bool log);

}  // namespace hg::kernels
