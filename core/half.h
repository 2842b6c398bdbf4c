// hg::half (IEEE binary16) and hg::bfloat16: 2-byte *storage* types. They convert to and from
// float with round-to-nearest-even and keep inf, NaN and subnormals; they never do arithmetic
// of their own (compute in float: see Acc<T> in visit.h).
//
//   hg::half h(0.1f);        // nearest f16: 0.0999755859375
//   float f = h;             // exact widening
//
// Scalar conversions use F16C instructions when the build targets them; the bulk converters
// (convert_to_float / convert_from_float) pick F16C, AVX512-BF16 or NEON by the CPU level in
// use (core/cpu_features.h) and fall back to the portable bit-level code below.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace hg {

namespace detail {

// ---- portable bit-level conversions (the reference every fast path is tested against) ----

constexpr float f16_bits_to_float_portable(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf/NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal: mantissa * 2^-24. Shift until the implicit bit appears, lowering the exponent.
  uint32_t biased = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --biased;
  }
  return std::bit_cast<float>(sign | (biased << 23) | ((mantissa & 0x3ffu) << 13));
}

constexpr uint16_t float_to_f16_bits_portable(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // quiet NaN
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal f16 (or overflow to inf)
    uint32_t rebiased = magnitude - (112u << 23);
    rebiased += 0xfffu + ((rebiased >> 13) & 1u);  // round to nearest, ties to even
    rebiased >>= 13;
    return uint16_t(sign | (rebiased >= 0x7c00u ? 0x7c00u : rebiased));
  }
  // NOTE: 2^-25 is exactly halfway between 0 and the smallest subnormal; ties go to even (0).
  if (magnitude <= 0x33000000u) return uint16_t(sign);
  // Subnormal f16: value = full * 2^(e-150) = result * 2^-24, so result = full >> (126 - e).
  const uint32_t full = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (magnitude >> 23);
  uint32_t result = full >> shift;
  const uint32_t remainder = full & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
  return uint16_t(sign | result);  // result may carry into 0x400, the smallest normal: still right
}

constexpr float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

constexpr uint16_t float_to_bf16_bits_portable(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // round to nearest even
}

// ---- scalar conversions used by kernels: hardware where the build targets it ----

inline float f16_bits_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return f16_bits_to_float_portable(h);
#endif
}

inline uint16_t float_to_f16_bits(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return float_to_f16_bits_portable(f);
#endif
}

}  // namespace detail

struct half {
  uint16_t bits = 0;
  half() = default;
  explicit half(float f) : bits(detail::float_to_f16_bits(f)) {}
  operator float() const { return detail::f16_bits_to_float(bits); }
  static constexpr half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(detail::float_to_bf16_bits_portable(f)) {}
  operator float() const { return detail::bf16_bits_to_float(bits); }
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

// ---- bulk conversions: the CPU is asked once what it supports ----

void convert_to_float(const half* src, float* dst, size_t n);
void convert_to_float(const bfloat16* src, float* dst, size_t n);
void convert_from_float(const float* src, half* dst, size_t n);
void convert_from_float(const float* src, bfloat16* dst, size_t n);

// values[i] = float(T(values[i])) in place (T half or bfloat16): a float result rounded to the
// 16-bit type as a 16-bit op's output is, kept in float, without the 16-bit tensor a
// `.to(bf16).to(f32)` allocates: bf16 by rounding each float's bits in place, f16 through a small
// buffer that stays in L1.
template <class T>
void round_through(float* values, size_t n);

}  // namespace hg
