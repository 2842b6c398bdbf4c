// Bulk 16-bit <-> float conversion, one implementation per CPU level (core/cpu_features.h):
// F16C (avx2 and above), AVX512-BF16 (avx512bf16), NEON (aarch64), and the portable bit-level
// code of half.h that every fast path is tested against. The SIMD paths are compiled for their
// instruction set inside HG_TARGET regions, so a portable build still uses them where present.
#include "core/half.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/simd_target.h"

#if HG_X86
#include <immintrin.h>
#elif HG_ARM
#include <arm_neon.h>
#endif

namespace hg {

namespace {

#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)

void f16_to_float_f16c(const half* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i].bits);
}

void float_to_f16_f16c(const float* src, half* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i].bits = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512BF16_FEATURES)

// NOTE: vcvtneps2bf16 flushes float subnormals (0 < |x| < 2^-126) to zero, which
// round-to-nearest-even does not. Lanes holding a subnormal are redone with the portable code;
// they are rare. Zeros are not subnormal: relu outputs are half zeros, and redoing those lanes
// one by one made this conversion the slowest part of a bf16 CNN step.
void float_to_bf16_avx512(const float* src, bfloat16* dst, size_t n) {
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff), smallest_normal = _mm512_set1_epi32(0x00800000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    const __m256bh r = _mm512_cvtneps_pbh(v);
    std::memcpy(static_cast<void*>(dst + i), &r, sizeof(r));
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(v), magnitude_mask);
    const __mmask16 subnormal =
        _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(magnitude, magnitude), magnitude, smallest_normal);
    if (subnormal) {
      for (int lane = 0; lane < 16; ++lane)
        if (subnormal & (1u << lane)) dst[i + lane].bits = detail::float_to_bf16_bits_portable(src[i + lane]);
    }
  }
  for (; i < n; ++i) dst[i].bits = detail::float_to_bf16_bits_portable(src[i]);
}

HG_TARGET_END
#endif  // HG_X86

#if HG_ARM
// Advanced SIMD converts f16 natively (fcvtl / fcvtn, round to nearest even, NaN kept quiet).
void f16_to_float_neon(const half* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(src + i)))));
  for (; i < n; ++i) dst[i] = detail::f16_bits_to_float_portable(src[i].bits);
}

void float_to_f16_neon(const float* src, half* dst, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1_u16(reinterpret_cast<uint16_t*>(dst + i), vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
  for (; i < n; ++i) dst[i].bits = detail::float_to_f16_bits_portable(src[i]);
}
#endif  // HG_ARM

}  // namespace

void convert_to_float(const half* src, float* dst, size_t n) {
#if HG_X86
  if (cpu::supports(cpu::Isa::Avx2)) return f16_to_float_f16c(src, dst, n);
#elif HG_ARM
  if (cpu::supports(cpu::Isa::Neon)) return f16_to_float_neon(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = detail::f16_bits_to_float_portable(src[i].bits);
}

void convert_from_float(const float* src, half* dst, size_t n) {
#if HG_X86
  if (cpu::supports(cpu::Isa::Avx2)) return float_to_f16_f16c(src, dst, n);
#elif HG_ARM
  if (cpu::supports(cpu::Isa::Neon)) return float_to_f16_neon(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i].bits = detail::float_to_f16_bits_portable(src[i]);
}

void convert_to_float(const bfloat16* src, float* dst, size_t n) {
  // Widening bf16 is a 16-bit shift; the compiler vectorises this loop on its own.
  for (size_t i = 0; i < n; ++i) dst[i] = detail::bf16_bits_to_float(src[i].bits);
}

void convert_from_float(const float* src, bfloat16* dst, size_t n) {
#if HG_X86
  if (cpu::supports(cpu::Isa::Avx512Bf16)) return float_to_bf16_avx512(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i].bits = detail::float_to_bf16_bits_portable(src[i]);
}

template <class T>
void round_through(float* values, size_t n) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    // A bf16 is a float's upper half: rounding to it in place is float_to_bf16_bits_portable's
    // add and a mask on each value's bits (NaN quieted as there), one loop the compiler
    // vectorises, instead of two conversions through a buffer (batch_norm's fused residual + ReLU
    // forward on 128x16x28x28 bf16: 1.67-1.70 ms against 1.78-1.88, docs/results.md section 23).
    for (size_t i = 0; i < n; ++i) {
      const uint32_t x = std::bit_cast<uint32_t>(values[i]);
      const uint32_t rounded = (x & 0x7fffffffu) > 0x7f800000u ? x | 0x400000u : x + 0x7fffu + ((x >> 16) & 1u);
      values[i] = std::bit_cast<float>(rounded & 0xffff0000u);
    }
    return;
  }
  constexpr size_t kChunk = 1024;  // 2 KiB of T and 4 KiB of float per round: both in L1
  T buffer[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t count = std::min(kChunk, n - i);
    convert_from_float(values + i, buffer, count);
    convert_to_float(buffer, values + i, count);
  }
}

template void round_through<half>(float*, size_t);
template void round_through<bfloat16>(float*, size_t);

}  // namespace hg
