// Reductions. Sums accumulate in double for floating inputs (so a sum of 10^7 f32 values is exact
// to ~1e-7 relative) and in int64 for integers, and split work into fixed chunks, so the result
// is the same for any thread count. amax/argmax propagate NaN (NaN counts as the maximum).
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor sum(const Tensor& x);                                      // all elements, 0-d result
Tensor sum(const Tensor& x, Shape dims, bool keepdim = false);
Tensor mean(const Tensor& x);                                     // NaN for an empty tensor, like PyTorch
Tensor mean(const Tensor& x, Shape dims, bool keepdim = false);
Tensor amax(const Tensor& x, int dim, bool keepdim = false);      // ties share the gradient equally
Tensor argmax(const Tensor& x, int dim);                          // i64, first maximal index

// Sums `g` over the dimensions that broadcasting expanded, back to `shape` (gradients of
// broadcast inputs).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace hg
