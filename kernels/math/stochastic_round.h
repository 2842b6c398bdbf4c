// Stochastic rounding of one f32 value to bf16 or f16, the one definition the CPU loops
// (kernels/cpu/stochastic_round.cpp, the pure 16-bit optimizers' loop kernels/cpu/rounded_update.h)
// call. x lies between two neighbours lo <= |x| < hi of the 16-bit type; it becomes hi with
// probability (|x| - lo) / (hi - lo) and lo otherwise, so the expected result is x itself: an
// update far below half a 16-bit ulp still moves the weight *on average* (nearest rounding loses
// it every time). `random16` holds 16 uniform random bits (its low 16 bits are used).
//
//   exact values (x a bf16/f16 value): unchanged, whatever the random bits;
//   NaN -> a quiet NaN of the same sign, +-inf -> +-inf, -0 -> -0;
//   overflow: the neighbour after the largest finite value is taken to be inf (bf16: a finite f32
//     above 3.3895e38 becomes inf with probability (|x| - 3.3895e38) / (2^128 - 3.3895e38);
//     f16: |x| in (65504, 65536) with probability (|x| - 65504) / 32, |x| >= 65536 always) --
//     nearest rounding sends |x| >= 3.3962e38 (bf16) or >= 65520 (f16) to inf every time.
//
// bf16 keeps f32's exponent, so the rounding is one integer add on the f32 bits: adding r in
// [0, 2^16) to the 16 bits that bf16 drops carries into bit 16 exactly when r >= 2^16 - low, that
// is with probability low / 2^16 -- exact, no bias at all, subnormals included.
// f16: the fraction of an f16 ulp is compared with r / 2^16. It is exact wherever |x| is an f32
// whose bits below f16's ulp number at most 16 -- every |x| >= 2^-14 (f16's normal range: 13
// bits) -- and biased upward by less than 2^-16 ulp below that (f16's subnormals).
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "kernels/math/common.h"

namespace hg::kernels::math {

HG_HD uint16_t bf16_bits_stochastic(float x, uint32_t random16) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN, as nearest does
  // NOTE: no carry can reach the sign: the largest magnitude here is inf (0x7f800000) + 0xffff.
  return uint16_t((bits + (random16 & 0xffffu)) >> 16);
}

HG_HD uint16_t f16_bits_stochastic(float x, uint32_t random16) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (magnitude_bits == 0x7f800000u) return uint16_t(sign | 0x7c00u);  // inf
  const float a = std::bit_cast<float>(magnitude_bits);
  // lo: the f16 at or below |x| -- nearest rounding gives lo or the value above it (0x7c00, inf,
  // past 65520), one step down when it went up (to 0x7bff = 65504 at most).
  uint16_t m = detail::float_to_f16_bits_portable(a);
  if (detail::f16_bits_to_float_portable(m) > a) --m;
  const float lo = detail::f16_bits_to_float_portable(m);
  // (|x| - lo) is exact in f32 (both lie within one f16 ulp, on |x|'s grid); scaled to units of
  // 2^-16 ulp, with ulp = 2^(max(e, 1) - 25) for lo's biased exponent e, by a power of two.
  const int e = m >> 10;
  const int shift = 41 - (e > 1 ? e : 1);  // 16 - log2(ulp), in [11, 40]
  const float scaled = (a - lo) * std::bit_cast<float>(uint32_t(127 + shift) << 23);
  if (float(random16 & 0xffffu) < scaled) ++m;  // 0x7bff + 1 = 0x7c00: inf
  return uint16_t(sign | m);
}

// The 16-bit type T (bfloat16 or half) from x, stochastically.
template <class T>
HG_HD T stochastic_round_to(float x, uint32_t random16) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, half>, "stochastic rounding is to bf16 or f16");
  if constexpr (std::is_same_v<T, bfloat16>) return T::from_bits(bf16_bits_stochastic(x, random16));
  else return T::from_bits(f16_bits_stochastic(x, random16));
}

}  // namespace hg::kernels::math
