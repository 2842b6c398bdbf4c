// Encoding and decoding the two FP8 formats from their parameters (core/float8.h), without bit
// tricks: a value is sign * q * 2^k with q an integer of at most mantissa_bits + 1 bits, and
// rounding to FP8 is rounding q.
#include "core/float8.h"

#include <cmath>

namespace hg::detail {

namespace {

// Round to the nearest integer, ties to even, whatever the floating-point environment says
// (std::nearbyint follows the current rounding mode). v is small and exact here.
double round_half_even(double v) {
  double r = std::floor(v);
  const double fraction = v - r;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return r;
}

}  // namespace

uint8_t encode_float8(double x, const Float8Format& format, Float8Overflow overflow) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return uint8_t(sign | format.nan_code);
  const uint8_t overflowed = overflow == Float8Overflow::Saturate ? format.max_code
                             : format.has_inf                      ? format.inf_code
                                                                   : format.nan_code;
  const double magnitude = std::fabs(x);
  if (std::isinf(magnitude)) return uint8_t(sign | overflowed);
  if (magnitude == 0.0) return sign;

  const int M = format.mantissa_bits;
  const int min_exponent = 1 - format.bias;  // the smallest normal is 2^min_exponent
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  exponent -= 1;                     // magnitude = 1.xxx * 2^exponent
  if (exponent > format.bias + 1) return uint8_t(sign | overflowed);  // far beyond any code

  // Below the smallest normal the spacing stays that of the subnormals, 2^(min_exponent - M).
  const int e = exponent < min_exponent ? min_exponent : exponent;
  const double q = round_half_even(std::ldexp(magnitude, M - e));  // in [0, 2^(M+1)]
  // A normal code is (e + bias) << M plus the mantissa q - 2^M. Rounding up to q = 2^(M+1)
  // carries into the exponent, and a subnormal (q < 2^M at e = min_exponent, exponent field 0)
  // fits the same formula, so one line covers both.
  const long code = (long(e + format.bias) << M) + long(q) - (1L << M);
  if (code > format.max_code) return uint8_t(sign | overflowed);
  return uint8_t(sign | code);
}

float decode_float8(uint8_t code, const Float8Format& format) {
  const int M = format.mantissa_bits;
  const int all_ones = (1 << format.exponent_bits) - 1;
  const int exponent_field = (code & 0x7f) >> M;
  const int mantissa = code & ((1 << M) - 1);
  const bool negative = (code & 0x80) != 0;
  if (format.has_inf && exponent_field == all_ones) {
    if (mantissa != 0) return std::nanf("");
    return negative ? -INFINITY : INFINITY;
  }
  if (!format.has_inf && (code & 0x7f) == 0x7f) return std::nanf("");
  const float magnitude = exponent_field == 0
                              ? std::ldexp(float(mantissa), 1 - format.bias - M)
                              : std::ldexp(float((1 << M) + mantissa), exponent_field - format.bias - M);
  return negative ? -magnitude : magnitude;
}

}  // namespace hg::detail
