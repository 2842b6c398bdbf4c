// The wide-rows layout that the f32 direct convolution (kernels/cpu/conv_wide_rows.h) and the
// weight gradient (kernels/cpu/conv_weight_grad.h) share: a part's images side by side in one
// zero-padded plane per channel,
//
//   row h of channel c:   [pad zeros][image 0, row h][pad zeros][image 1, row h] ... [pad zeros]
//
// neighbours sharing their pad columns (slot = W + pad columns per image). For stride 1, output
// position q = oh * Wp + b * slot + ow reads tap (c, i, j) at plane[offset(c, i, j) + q], offset =
// (c*Hp + i*d)*Wp + j*d: every tap's values for all positions are one contiguous run.
//
// Stride 2 (dilation 1) becomes the same: the padded input xp splits into four phase planes per
// channel, phase (a, b) holding image n's xp[2u + a][2v + b] at row u, column n * slot + v
// (padding included, slot = half the padded width, rounded up). Output (oh, ow) reads xp[2oh + i][2ow + j]
// = phase (i % 2, j % 2) at row oh + i / 2, column ow + j / 2: offset(c, i, j) = ((4c + 2(i % 2)
// + j % 2) * Hp + i / 2) * Wp + j / 2, and q = oh * Wp + b * slot + ow as for stride 1. No
// products are added; the plane holds the input once, as before.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/half.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

struct WidePlane {
  int64_t images, Hp, Wp, slot;
  int64_t phases;  // planes per channel: 1, or 4 for stride 2
  int64_t positions(const ConvGeometry& g) const { return g.OH * Wp; }  // q's range
  int64_t floats(const ConvGeometry& g) const { return g.C * phases * Hp * Wp; }
};
WidePlane wide_plane(const ConvGeometry& g, int64_t images);

// Whether the layout serves the geometry: one group; stride 1 with pad <= dilation * (kw - 1)
// (each image's outputs then read only its own columns and the pad columns beside it), or stride
// 2 with dilation 1.
bool wide_layout_serves(const ConvGeometry& g);

// Images per part: enough for about `positions` output positions (OH * Wp), at most 32, and no
// more than keep the part's plane within 512 KB (an L2 share: a 384-channel 1x1 layer's 32-image
// plane of 7x7 maps, 2.4 MB, ran at half the GEMM's speed); at least one.
int64_t images_per_part(const ConvGeometry& g, int64_t positions);

// Images [n0, n0 + p.images) of x (N, C, H, W) into the plane's values (16-bit widened); the zeros
// around them must already be there (ZeroedScratch).
template <class T>
void lay_out_images(const T* x, const ConvGeometry& g, int64_t n0, const WidePlane& p, float* plane);

// Where each tap's run starts in the plane, taps in w's order (c, i, j).
void tap_offsets(const ConvGeometry& g, const WidePlane& p, std::vector<int64_t>& offsets);

// `rows` rows of n floats (any n), src_pitch and dst_pitch apart: masked AVX-512 or AVX2 moves at
// those levels (a memcpy call per 28-value row cost a quarter of the weight gradient's products).
void copy_rows(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch, int64_t rows, int64_t n);

// src[0], src[2], ... to evens[0], evens[1], ... and src[1], src[3], ... to odds (n values, any
// n): the stride-2 layout's column split, two-vector permutes at the AVX-512 and AVX2 levels.
void deinterleave(const float* src, int64_t n, float* evens, float* odds);

// Whether any of n floats is infinite or NaN (exponent all ones), without a branch per value:
// the wide weight gradients' test for a part whose zero columns met an infinite input.
bool any_non_finite(const float* v, int64_t n);

// A per-thread buffer whose zeros are written once per layout: laid out the same way again (the
// next part, the next step), only the values are overwritten -- clearing a part's plane every
// time cost a tenth of the weight gradient.
template <class V>
struct ZeroedScratch {
  std::vector<V> values;
  std::vector<int64_t> layout;  // what the zeros were written for
  // The buffer, at least `size` values, all zero unless the last call had the same layout.
  V* prepare(int64_t size, const std::vector<int64_t>& for_layout) {
    if (layout != for_layout || values.size() < size_t(size)) {
      if (values.size() < size_t(size)) values.resize(size_t(size));
      std::fill_n(values.data(), size, V(0));
      layout = for_layout;
    }
    return values.data();
  }
};

}  // namespace hg::kernels::cpu
