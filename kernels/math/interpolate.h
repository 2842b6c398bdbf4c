// interpolate's index math (PyTorch's upsample_nearest2d and upsample_bilinear2d), the one
// definition the CPU loops (kernels/interpolate.cpp) and the CUDA kernels
// (kernels/cuda/interpolate.cu) both run. Each output index o along an axis reads two source
// indices i0 <= i1 with weights w0 + w1 = 1 (nearest: i0 == i1, w1 = 0). i0 never decreases as o
// grows, which lets a backward gather, for each input index, the outputs that read it (no
// atomics, one order on both devices).
#pragma once
#include <cstdint>

#include "kernels/math/common.h"

namespace hg::kernels::math {

// One axis of a resize: `in` source positions to `out` destinations.
struct ResizeAxis {
  int64_t in, out;
  double scale;  // source units per destination step (resize_scale)
  bool align_corners;
};

// Both axes and the mode.
struct Resize {
  ResizeAxis rows, cols;
  bool bilinear;  // else nearest
};

// PyTorch's scale: with align_corners, (in - 1) / (out - 1) (0 for a single output); else
// 1 / scale_factor where the caller gave one (scale_factor > 0), else in / out.
inline double resize_scale(int64_t in, int64_t out, bool align_corners, double scale_factor) {
  if (align_corners) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  return scale_factor > 0 ? 1.0 / scale_factor : double(in) / double(out);
}

template <class A>
struct Taps {
  int64_t i0, i1;
  A w0, w1;
};

// nearest: PyTorch's legacy rule, min(floor(o * scale), in - 1), computed in float as PyTorch
// computes it (a double product could round the other way at an integer).
HG_HD int64_t nearest_source(const ResizeAxis& a, int64_t o) {
  const int64_t i = int64_t(floorf(float(o) * float(a.scale)));
  return i < a.in - 1 ? i : a.in - 1;
}

// bilinear: the source coordinate (pixel centres unless align_corners), clamped at 0 below, and
// its two neighbours; A is the compute type (float for f32 and the 16-bit types, double for f64).
template <class A>
HG_HD Taps<A> linear_taps(const ResizeAxis& a, int64_t o) {
  const A scale = A(a.scale);
  A src = a.align_corners ? scale * A(o) : scale * (A(o) + A(0.5)) - A(0.5);
  if (src < A(0)) src = A(0);
  int64_t i0 = int64_t(src);
  if (i0 > a.in - 1) i0 = a.in - 1;
  A w1 = src - A(i0);
  w1 = w1 < A(0) ? A(0) : (w1 > A(1) ? A(1) : w1);
  return {i0, i0 + (i0 < a.in - 1 ? 1 : 0), A(1) - w1, w1};
}

template <class A>
HG_HD Taps<A> source_taps(const ResizeAxis& a, int64_t o, bool bilinear) {
  if (bilinear) return linear_taps<A>(a, o);
  const int64_t i = nearest_source(a, o);
  return {i, i, A(1), A(0)};
}

// The weight with which output o reads input i (0 when it does not).
template <class A>
HG_HD A tap_weight(const Taps<A>& t, int64_t i) {
  return (t.i0 == i ? t.w0 : A(0)) + (t.i1 == i ? t.w1 : A(0));
}

// The outputs that may read input i: [first, last), by binary search on the nondecreasing i0
// (o reads i only if i0(o) is i, or i - 1 for bilinear's second tap).
struct OutputRange {
  int64_t first, last;
};

template <class A>
HG_HD int64_t first_output_from(const ResizeAxis& a, bool bilinear, int64_t i) {  // first o with i0(o) >= i
  int64_t lo = 0, hi = a.out;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (source_taps<A>(a, mid, bilinear).i0 >= i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

template <class A>
HG_HD OutputRange outputs_reading(const ResizeAxis& a, bool bilinear, int64_t i) {
  return {first_output_from<A>(a, bilinear, bilinear ? i - 1 : i), first_output_from<A>(a, bilinear, i + 1)};
}

}  // namespace hg::kernels::math
