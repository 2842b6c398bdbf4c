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
// Narrow views along `dim`, as PyTorch's: pieces of `size` (the last may be shorter), pieces of
// the given sizes (which must add up to the dim), or `n` pieces of ceil(dim / n) (fewer when
// the dim runs out first: chunk of 6 rows into 4 gives 3 pieces of 2).
std::vector<Tensor> split(const Tensor& x, int64_t size, int dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int n, int dim = 0);

}  // namespace hg
