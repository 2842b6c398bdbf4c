// max_pool_2x2_row for each CPU level (see pool.h): portable, AVX2 (8 outputs per step) and
// AVX-512 (16), the vector ones masking a row's last partial step. They separate even and odd
// columns with a permute, then three selects pick each window's maximum and its position. GCC does not vectorise the portable
// version (the stride-2 loads and the index selects), and scalar branches on random data
// mispredict half the time.
#include "kernels/cpu/pool.h"

#include "core/cpu_features.h"
#include "core/simd_target.h"
#include "kernels/cpu/avx2_lanes.h"
#include "kernels/math/pool.h"

#if HG_X86
// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (masked loads);
// a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif

#include <algorithm>

namespace hg::kernels::cpu {

namespace {

// "a, or b if b is larger": math::max_pool_takes (NaN wins, then the first maximum).
inline void keep_larger(float a, int ia, float b, int ib, float& m, int& im) {
  const bool take = math::max_pool_takes(a, b);
  m = take ? b : a;
  im = take ? ib : ia;
}

// Outputs [begin, OW) one at a time: the portable kernel.
void max_pool_2x2_row_generic(const float* r0, const float* r1, float* y, uint8_t* where, int64_t begin, int64_t OW) {
  for (int64_t ow = begin; ow < OW; ++ow) {
    float top, bottom, best;
    int i_top, i_bottom, i_best;
    keep_larger(r0[2 * ow], 0, r0[2 * ow + 1], 1, top, i_top);
    keep_larger(r1[2 * ow], 2, r1[2 * ow + 1], 3, bottom, i_bottom);
    keep_larger(top, i_top, bottom, i_bottom, best, i_best);
    y[ow] = best;
    where[ow] = uint8_t(i_best);
  }
}

}  // namespace

#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace {

using avx2::first_lanes;

// All-ones lanes where b replaces a: b > a or b is NaN, unless a is already NaN.
inline __m256 larger_avx2(__m256 a, __m256 b) {
  return _mm256_and_ps(_mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q)),
                       _mm256_cmp_ps(a, a, _CMP_ORD_Q));
}

// Even and odd elements of 16 consecutive floats: shuffle within 128-bit lanes, then put the
// 64-bit chunks in order.
inline __m256 even_avx2(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}
inline __m256 odd_avx2(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

inline __m256i select_index(__m256 take, int a, int b) {
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(_mm256_set1_epi32(a)), _mm256_castsi256_ps(_mm256_set1_epi32(b)), take));
}

void max_pool_2x2_row_avx2(const float* r0, const float* r1, float* y, uint8_t* where, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ow += 8) {
    // The last step of a row takes its n < 8 windows with masked loads and stores: a CNN's rows
    // are short (28 -> 14 = 8 + 6 outputs, 14 -> 7), and a scalar tail was 15% of its step.
    const int64_t n = std::min<int64_t>(8, OW - ow);
    __m256 a0, a1, b0, b1;
    if (n == 8) {
      a0 = _mm256_loadu_ps(r0 + 2 * ow), a1 = _mm256_loadu_ps(r0 + 2 * ow + 8);
      b0 = _mm256_loadu_ps(r1 + 2 * ow), b1 = _mm256_loadu_ps(r1 + 2 * ow + 8);
    } else {
      const __m256i lo = first_lanes(std::min<int64_t>(2 * n, 8)), hi = first_lanes(std::max<int64_t>(2 * n - 8, 0));
      a0 = _mm256_maskload_ps(r0 + 2 * ow, lo), a1 = _mm256_maskload_ps(r0 + 2 * ow + 8, hi);
      b0 = _mm256_maskload_ps(r1 + 2 * ow, lo), b1 = _mm256_maskload_ps(r1 + 2 * ow + 8, hi);
    }
    const __m256 tl = even_avx2(a0, a1), tr = odd_avx2(a0, a1), bl = even_avx2(b0, b1), br = odd_avx2(b0, b1);
    const __m256 k_top = larger_avx2(tl, tr), k_bottom = larger_avx2(bl, br);
    const __m256 top = _mm256_blendv_ps(tl, tr, k_top), bottom = _mm256_blendv_ps(bl, br, k_bottom);
    const __m256i i_top = select_index(k_top, 0, 1), i_bottom = select_index(k_bottom, 2, 3);
    const __m256 k = larger_avx2(top, bottom);
    const __m256 best = _mm256_blendv_ps(top, bottom, k);
    const __m256i index = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(i_top), _mm256_castsi256_ps(i_bottom), k));
    // 8 x int32 -> 8 x int16 -> 8 bytes (the values are 0..3)
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(index), _mm256_extracti128_si256(index, 1));
    const __m128i bytes = _mm_packus_epi16(words, words);
    if (n == 8) {
      _mm256_storeu_ps(y + ow, best);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(where + ow), bytes);
    } else {
      _mm256_maskstore_ps(y + ow, first_lanes(n), best);
      alignas(16) uint8_t indices[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(indices), bytes);
      std::copy(indices, indices + n, where + ow);
    }
  }
}

}  // namespace
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace {

inline __mmask16 larger_avx512(__m512 a, __m512 b) {
  return __mmask16((_mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q)) &
                   _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q));
}

void max_pool_2x2_row_avx512(const float* r0, const float* r1, float* y, uint8_t* where, int64_t OW) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const __mmask16 lo = n >= 8 ? __mmask16(0xFFFF) : __mmask16((1u << (2 * n)) - 1);
    const __mmask16 hi = n <= 8 ? __mmask16(0) : __mmask16((1u << (2 * (n - 8))) - 1);
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
    const __m512 tl = _mm512_permutex2var_ps(a0, even, a1), tr = _mm512_permutex2var_ps(a0, odd, a1);
    const __m512 bl = _mm512_permutex2var_ps(b0, even, b1), br = _mm512_permutex2var_ps(b0, odd, b1);
    const __mmask16 k_top = larger_avx512(tl, tr), k_bottom = larger_avx512(bl, br);
    const __m512 top = _mm512_mask_blend_ps(k_top, tl, tr), bottom = _mm512_mask_blend_ps(k_bottom, bl, br);
    const __m512i i_top = _mm512_mask_blend_epi32(k_top, _mm512_set1_epi32(0), _mm512_set1_epi32(1));
    const __m512i i_bottom = _mm512_mask_blend_epi32(k_bottom, _mm512_set1_epi32(2), _mm512_set1_epi32(3));
    const __mmask16 k = larger_avx512(top, bottom);
    const __mmask16 out = __mmask16((1u << n) - 1);
    _mm512_mask_storeu_ps(y + ow, out, _mm512_mask_blend_ps(k, top, bottom));
    _mm_mask_storeu_epi8(where + ow, out, _mm512_cvtepi32_epi8(_mm512_mask_blend_epi32(k, i_top, i_bottom)));
  }
}

}  // namespace
HG_TARGET_END
#endif  // HG_X86

void max_pool_2x2_row(const float* r0, const float* r1, float* y, uint8_t* where, int64_t OW) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return max_pool_2x2_row_avx512(r0, r1, y, where, OW);
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return max_pool_2x2_row_avx2(r0, r1, y, where, OW);
#endif
  max_pool_2x2_row_generic(r0, r1, y, where, 0, OW);
}

}  // namespace hg::kernels::cpu
