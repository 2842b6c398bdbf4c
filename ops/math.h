// Math functions beyond arithmetic (PyTorch's torch.reciprocal, torch.erf, torch.maximum, ...):
// elementwise, differentiable, on the CPU (every SIMD level through the elementwise loop) and
// CUDA. Each has its op-table row; reciprocal, rsqrt, log1p, expm1 and pow run in f32 under
// autocast (PyTorch's list: they need f32's range), the others keep the dtype they receive.
//
//   reciprocal(x) = 1 / x          rsqrt(x) = 1 / sqrt(x)      log1p(x) = log(1 + x), exact near 0
//   expm1(x) = exp(x) - 1, exact near 0                        erf(x), sin(x), cos(x)
//   sign(x) in {-1, 0, 1}          floor, ceil, round (halves to even): zero gradient, as PyTorch's
//   maximum(a, b), minimum(a, b)   NaN wins; a tie gives each operand half the gradient
//   pow(a, b)                      a^b for tensors (broadcast); d/db = a^b log a, 0 where a = 0
//   clamp(x, lo, hi)               tensor bounds (broadcast); lo > hi gives hi (and hi the gradient)
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor reciprocal(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);

Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);

}  // namespace hg
