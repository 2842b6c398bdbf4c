// Comparisons, logic and value tests: masks of u8 (1 = true, 0 = false), PyTorch's bool tensors.
// The operands broadcast and meet in their promoted dtype (an i64 against an f32 compares as f32).
// None is differentiable: a mask is a choice, it has no gradient; use it with where, masked_fill or
// a multiplication (a u8 mask times an f32 tensor is an f32 tensor).
//
//   Tensor keep = logical_and(ge(x, lo), lt(x, hi));   // lo <= x < hi
//   Tensor bad = logical_or(isnan(g), isinf(g));
//
// NaN compares false with everything, itself included (so ne(NaN, NaN) is 1); logical_* read any
// nonzero value, NaN included, as true.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);

}  // namespace hg
