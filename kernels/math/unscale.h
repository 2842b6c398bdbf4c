// GradScaler's unscale of one gradient element, the one definition the host loop
// (amp_tools/grad_scaler.cpp) and the CUDA kernel (kernels/cuda/amp.cu) both run: flag a value
// that is not finite, count f16 values that are zero or subnormal (the underflow the scale is
// there to prevent), and multiply by 1/scale.
//
// A is the gradient's compute type: f32 for 16-bit and f32 gradients, f64 for f64 ones (through
// f32, an f64 value above 3.4e38 would be flagged inf and the low bits lost).
#pragma once
#include "kernels/math/common.h"

namespace hg::kernels::math {

template <class A>
struct Unscale {
  A inv_scale;

  // NOTE: 1/scale in f64, rounded once to A (exact for powers of two), as PyTorch does.
  HG_HD static Unscale of(double scale) { return {A(1.0 / scale)}; }

  // NOTE: a gradient counts as inf/NaN when its value is not finite *or its unscaled value as
  // stored is not*: with a scale below 1, v / scale can overflow (an f16 gradient of 60000 at scale
  // 0.5), and a scale of 1e-40 would make every product inf. GradScaler keeps the scale a normal
  // f32 in [min_scale, max_scale], and this check makes the step skip, not apply inf, whatever
  // the scale.
  HG_HD static bool finite(A v) {
    using std::isfinite;  // (on the device the unqualified call finds CUDA's)
    return isfinite(v);
  }
  // The smallest normal f16 is 2^-14: below it in magnitude, an f16 value is zero or subnormal.
  HG_HD static bool f16_tiny(A v) { return (v < A(0) ? -v : v) < A(0x1p-14); }

  HG_HD A operator()(A v) const { return v * inv_scale; }
};

}  // namespace hg::kernels::math
