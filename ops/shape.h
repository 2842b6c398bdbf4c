// Shape ops. Views (reshape of a contiguous tensor, transpose, permute, expand, narrow,
// unsqueeze, squeeze) share storage with their input; contiguous() and cat copy. All are
// differentiable. The Tensor methods (reshape, transpose, ...) are defined in ops/shape.cpp.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hg {

Tensor expand(const Tensor& x, const Shape& shape);  // broadcast view (stride 0), no copy
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);            // removes dim, which must have size 1
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);  // a slice view
Tensor cat(const std::vector<Tensor>& tensors, int dim);
// The tensors (one shape) along a new dimension `dim` of the result: stack({a, b}, 0) is [2, ...].
Tensor stack(const std::vector<Tensor>& tensors, int dim);

}  // namespace hg
