// Sorting and selecting (PyTorch's torch.sort, topk, max/min with a dim, argmin, amin). The
// order is found on the host (stable: equal values keep their order; NaN sorts above +inf, as
// PyTorch's), then the values are gathered from the input, so they are exact and their gradient
// goes to the positions they came from. Indices are i64.
//
//   auto [values, indices] = sort(x, -1, /*descending=*/true);
//   auto [top, where] = topk(logits, 5);              // the 5 largest along the last dim, sorted
//   auto [best, at] = max(x, 1);                      // the first maximum of each row and its index
#pragma once
#include <tuple>

#include "core/tensor.h"

namespace hg {

std::tuple<Tensor, Tensor> sort(const Tensor& x, int dim = -1, bool descending = false);
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int dim = -1, bool largest = true);

// The first maximum (minimum) along dim and its index; NaN counts as the maximum and the
// minimum (it propagates). The gradient goes to that one position (amax/amin split ties).
std::tuple<Tensor, Tensor> max(const Tensor& x, int dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int dim);                      // i64, the first minimal index
Tensor amin(const Tensor& x, int dim, bool keepdim = false);  // ties share the gradient, as amax

}  // namespace hg
