// The FP8 recipes' per-tensor scale (amp/fp8.h's fp8_scale_for), one definition for the CPU
// quantiser (amp/fp8.cpp) and the CUDA one (kernels/cuda/fp8.cu): the power of two that maps amax
// to the top of the format, 2^floor(log2(largest / amax)) / 2^margin, and 1 for an amax of 0 or
// one that is not finite (an overflowed step keeps its values, saturated).
#pragma once
#include "kernels/math/common.h"

namespace hg::kernels::math {

// NOTE: the ratio is taken in f64 (exact for every f32 amax and 448 or 57344, up to one rounding
// that cannot cross a power of two) and its exponent read with frexp, so host and device agree
// bit for bit; the result is clamped to f32's normal powers of two.
HG_HD float fp8_scale_for(float amax, float largest, int margin) {
  using std::isfinite;  // (on the device the unqualified call finds CUDA's)
  if (!(amax > 0) || !isfinite(amax)) return 1.0f;
  int exponent = 0;
  frexp(double(largest) / double(amax), &exponent);  // ratio = f * 2^exponent, f in [0.5, 1)
  int power = exponent - 1 - margin;
  power = power < -126 ? -126 : power > 127 ? 127 : power;
  return ldexpf(1.0f, power);
}

}  // namespace hg::kernels::math
