// stochastic_round: f32 -> bf16 (or f16) rounding that is unbiased on average. A value between two
// neighbours lo < x < hi of the 16-bit type becomes hi with probability (x - lo) / (hi - lo), so
// E[result] = x: updates far below half a bf16 ulp (a weight of 1.0 moved by 1e-3, where the ulp is
// 2^-7 = 0.0078) accumulate on average instead of vanishing -- what lets a model train with bf16
// weights and no f32 master copy (optim's Rounding::Stochastic).
//
//   hg::Tensor w16 = hg::stochastic_round(w32, hg::bf16, /*seed=*/42, /*offset=*/step * n);
//   hg::Tensor w16 = hg::stochastic_round(w32, hg::bf16);   // from the default generator (manual_seed)
//
// The random bits are Philox's (core/philox.h): element i (in row-major order) takes 16 bits of
// the block counter offset + i / 8, so a call uses ceil(numel / 8) counters from `offset` and the
// result depends on (seed, offset) only -- the same for any thread count and CPU level.
// Exact values (already bf16) are unchanged; NaN stays NaN, +-inf stays +-inf. Overflow: the value
// after bf16's largest (3.3895e38) is taken to be inf, so a larger finite f32 becomes inf with
// probability equal to its fraction of the way to 2^128 (kernels/math/stochastic_round.h; f16:
// to inf from 65504 on, always from 65536). Not differentiable: the result has no history.
// CPU tensors only for now: a CUDA tensor is an hg::Error.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

// x: an f32 tensor on the CPU; dtype: bf16 or f16.
Tensor stochastic_round(const Tensor& x, DType dtype, uint64_t seed, uint64_t offset);
// The same with the default generator's next numel counters (hg::manual_seed makes it reproducible).
Tensor stochastic_round(const Tensor& x, DType dtype);

}  // namespace hg
