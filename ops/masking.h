// Masking ops: masked_fill, tril, triu -- the pieces of an attention mask. A mask is an integer
// tensor (u8 from the comparisons; any integer dtype), nonzero = true, that broadcasts against
// the input. Each is one choice per element (kernels::math::Select, as where), so the value put
// in (-inf for attention) never meets the gradient: the backward passes g where the input was
// kept and 0 where it was replaced.
//
//   masked_fill(x, mask, value)   value where mask is nonzero, else x; the result has the
//                                 broadcast shape and x's dtype (value -inf is exact in f16/bf16)
//   tril(x, diagonal = 0)         x[..., i, j] where j - i <= diagonal, else 0 (the lower triangle)
//   triu(x, diagonal = 0)         x[..., i, j] where j - i >= diagonal, else 0 (the upper triangle)
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

}  // namespace hg
