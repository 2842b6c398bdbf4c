// Stochastic rounding of an f32 array to bf16 or f16 on the CPU (the rule: kernels/math/
// stochastic_round.h). Element i takes 16 random bits, half (i % 8) of the Philox block
// offset + i / 8 (half h = bits 16 (h % 2) .. of word h / 2): a call on n elements uses
// ceil(n / 8) counters from `offset`. The bits depend on (seed, offset, i) only, so the result is
// the same for any thread count and at every HG_CPU_ISA level (integer arithmetic throughout).
#pragma once
#include <cstdint>

#include "core/half.h"

namespace hg::kernels::cpu {

inline constexpr int64_t kStochasticRoundsPerCounter = 8;  // 128 bits of a Philox block / 16

void stochastic_round(const float* in, bfloat16* out, int64_t n, uint64_t seed, uint64_t offset);
void stochastic_round(const float* in, half* out, int64_t n, uint64_t seed, uint64_t offset);

}  // namespace hg::kernels::cpu
