// Lane masks for AVX2's masked loads and stores (vmaskmovps never touches memory in a masked-off
// lane), shared by the AVX2 kernels. Compiled for AVX2 whatever the build's baseline, like the
// kernels that call them (reached only through the dispatcher).
#pragma once
#include <cstdint>

#include "core/simd_target.h"

#if HG_X86
#include <immintrin.h>

namespace hg::kernels::cpu::avx2 {

HG_TARGET_BEGIN(HG_AVX2_FEATURES)

// Lanes lo <= l < hi set (lo, hi in 0..8).
inline __m256i lanes_between(int64_t lo, int64_t hi) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(index, _mm256_set1_epi32(int(lo) - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(int(hi)), index));
}

// The first n (0..8) lanes set.
inline __m256i first_lanes(int64_t n) { return lanes_between(0, n); }

HG_TARGET_END

}  // namespace hg::kernels::cpu::avx2

#endif  // HG_X86
