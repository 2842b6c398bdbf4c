// Bulk 16-bit <-> float conversion with run-time CPU detection. The SIMD paths are compiled with
// function-level target attributes, so a portable build (HG_NATIVE=OFF) still uses them on CPUs
// that have F16C or AVX512-BF16.
#include "core/half.h"

#include <immintrin.h>

#include <atomic>
#include <cstring>

namespace hg {

namespace cpu {
namespace {
std::atomic<bool> g_simd_enabled{true};
}
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return yes && g_simd_enabled.load(std::memory_order_relaxed);
}
bool has_avx512_bf16() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return yes && g_simd_enabled.load(std::memory_order_relaxed);
}
void set_simd_conversions(bool enabled) { g_simd_enabled.store(enabled); }
}  // namespace cpu

namespace {

// ---- F16C -------------------------------------------------------------------------------------

__attribute__((target("f16c,avx2"))) void f16_to_float_f16c(const half* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i].bits);
}

__attribute__((target("f16c,avx2"))) void float_to_f16_f16c(const float* src, half* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i].bits = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

// ---- AVX512-BF16 ------------------------------------------------------------------------------

// NOTE: vcvtneps2bf16 flushes float subnormals (0 < |x| < 2^-126) to zero, which
// round-to-nearest-even does not. Lanes holding a subnormal are redone with the portable code;
// they are rare. Zeros are not subnormal: relu outputs are half zeros, and redoing those lanes
// one by one made this conversion the slowest part of a bf16 CNN step.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void float_to_bf16_avx512(const float* src,
                                                                                 bfloat16* dst,
                                                                                 size_t n) {
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff), smallest_normal = _mm512_set1_epi32(0x00800000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    const __m256bh r = _mm512_cvtneps_pbh(v);
    std::memcpy(static_cast<void*>(dst + i), &r, sizeof(r));
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(v), magnitude_mask);
    const __mmask16 subnormal = _mm512_mask_cmplt_epu32_mask(
        _mm512_test_epi32_mask(magnitude, magnitude), magnitude, smallest_normal);
    if (subnormal) {
      for (int lane = 0; lane < 16; ++lane)
        if (subnormal & (1u << lane)) dst[i + lane].bits = detail::float_to_bf16_bits_portable(src[i + lane]);
    }
  }
  for (; i < n; ++i) dst[i].bits = detail::float_to_bf16_bits_portable(src[i]);
}

}  // namespace

void convert_to_float(const half* src, float* dst, size_t n) {
  if (cpu::has_f16c()) return f16_to_float_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = detail::f16_bits_to_float_portable(src[i].bits);
}

void convert_from_float(const float* src, half* dst, size_t n) {
  if (cpu::has_f16c()) return float_to_f16_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i].bits = detail::float_to_f16_bits_portable(src[i]);
}

void convert_to_float(const bfloat16* src, float* dst, size_t n) {
  // Widening bf16 is a 16-bit shift; the compiler vectorises this loop on its own.
  for (size_t i = 0; i < n; ++i) dst[i] = detail::bf16_bits_to_float(src[i].bits);
}

void convert_from_float(const float* src, bfloat16* dst, size_t n) {
  if (cpu::has_avx512_bf16()) return float_to_bf16_avx512(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i].bits = detail::float_to_bf16_bits_portable(src[i]);
}

}  // namespace hg
