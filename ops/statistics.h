// Reductions made of other ops (PyTorch's torch.prod, var, std, logsumexp, norm, cumsum): each is
// written with sum, mean, amax, mul, ... so its gradient is theirs, and 16-bit inputs are
// computed in f32 and rounded once at the end (PyTorch's opmath). Under autocast prod, logsumexp,
// norm and cumsum run in f32 (PyTorch's list); var and std keep the dtype they receive.
//
//   prod(x), prod(x, dim, keepdim)          a pairwise product tree: exact gradients with zeros
//   var(x, dims, {.correction, .keepdim})   sum((x - mean)^2) / (N - correction); std = sqrt(var)
//   logsumexp(x, dims, keepdim)             log(sum(exp(x))), shifted by the max: no overflow,
//                                           and -inf for a row of -inf (not NaN)
//   norm(x, p, dims, keepdim)               (sum |x|^p)^(1/p); p = inf: max |x|, p = 0: the
//                                           number of nonzeros; the gradient at x = 0 is 0
//   cumsum(x, dim)                          running sums (a Hillis-Steele scan: log2(n) adds)
// Empty `dims` means every dimension.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int dim, bool keepdim = false);

struct VarOptions {
  double correction = 1;  // Bessel's: N - 1 (0: the population variance)
  bool keepdim = false;
};
Tensor var(const Tensor& x, Shape dims = {}, VarOptions options = {});
Tensor std(const Tensor& x, Shape dims = {}, VarOptions options = {});

Tensor logsumexp(const Tensor& x, Shape dims, bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2, Shape dims = {}, bool keepdim = false);
Tensor cumsum(const Tensor& x, int dim);

}  // namespace hg
