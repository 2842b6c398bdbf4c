// hg::float8_e4m3 and hg::float8_e5m2: the two OCP 8-bit floating formats (OCP "8-bit Floating
// Point Specification" 1.0; NVIDIA's FP8, PyTorch's float8_e4m3fn / float8_e5m2).
//
//            sign  exponent  mantissa  bias  largest  smallest normal  smallest subnormal  inf  NaN
//   e4m3fn   1     4         3         7     448      2^-6             2^-9                no   S.1111.111
//   e5m2     1     5         2         15    57344    2^-14            2^-16               yes  S.11111.xx (xx != 0)
//
// e4m3 ("fn": finite, NaN only) spends the codes IEEE gives inf on more range: its largest value
// is 1.75 * 2^8 = 448. e5m2 is IEEE-like: f16 with its mantissa cut to 2 bits.
//
// Like half and bfloat16 (core/half.h) these are *storage* types: halfgrad computes on them only
// after converting to f32 (Tensor::to), and the FP8 recipes quantise and dequantise inside their
// ops. Narrowing rounds to nearest, ties to even, in one step from the source value (f64 included).
// A value beyond the largest finite one overflows: e4m3 gives NaN (it has no inf), e5m2 gives
// +-inf, as PyTorch's and ml_dtypes' casts; with Float8Overflow::Saturate both give +-largest
// instead, inf included (CUDA's __NV_SATFINITE, Transformer Engine's casts). NaN stays NaN.
#pragma once
#include <cstdint>

namespace hg {

enum class Float8Overflow : uint8_t {
  Default,   // e4m3: NaN, e5m2: +-inf (what IEEE-style rounding gives)
  Saturate,  // +-largest finite value, for overflowing finite values and for +-inf
};

namespace detail {

// What one format is, as numbers: enough to encode and decode it without a table.
struct Float8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_inf;       // e5m2: exponent all ones with mantissa 0 is inf; e4m3fn: no inf
  uint8_t max_code;   // the largest finite magnitude's code: e4m3 0x7e (448), e5m2 0x7b (57344)
  uint8_t nan_code;   // the NaN a conversion writes (sign bit clear): e4m3 0x7f, e5m2 0x7e
  uint8_t inf_code;   // e5m2 0x7c; unused for e4m3
};

inline constexpr Float8Format kE4M3{4, 3, 7, false, 0x7e, 0x7f, 0};
inline constexpr Float8Format kE5M2{5, 2, 15, true, 0x7b, 0x7e, 0x7c};

// The nearest code to x (ties to even), with the overflow rule above. Exact for every double.
uint8_t encode_float8(double x, const Float8Format& format, Float8Overflow overflow);
// The exact value of a code (every FP8 value is a float).
float decode_float8(uint8_t code, const Float8Format& format);

}  // namespace detail

// One storage type per format: the format's parameters are a template argument, so the two are
// distinct C++ types (visit_any_dtype tells them apart) written once.
template <const detail::Float8Format& Format>
struct float8 {
  uint8_t bits = 0;
  float8() = default;
  explicit float8(double x, Float8Overflow overflow = Float8Overflow::Default)
      : bits(detail::encode_float8(x, Format, overflow)) {}
  operator float() const { return detail::decode_float8(bits, Format); }
  static constexpr float8 from_bits(uint8_t b) {
    float8 v;
    v.bits = b;
    return v;
  }
};

using float8_e4m3 = float8<detail::kE4M3>;
using float8_e5m2 = float8<detail::kE5M2>;

static_assert(sizeof(float8_e4m3) == 1 && sizeof(float8_e5m2) == 1);

// The largest finite values, for scaling recipes: 448 and 57344.
inline constexpr float kFloat8E4M3Max = 448.0f;
inline constexpr float kFloat8E5M2Max = 57344.0f;

}  // namespace hg
