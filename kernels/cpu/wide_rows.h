// The wide-rows layout that the f32 direct convolution (kernels/cpu/conv_wide_rows.h) and the
// weight gradient (kernels/cpu/conv_weight_grad.h) share: a part's images side by side in one
// zero-padded plane per channel,
//
//   row h of channel c:   [pad zeros][image 0, row h][pad zeros][image 1, row h] ... [pad zeros]
//
// neighbours sharing their pad columns (slot = W + pad columns per image). For stride 1, output
// position q = oh * Wp + b * slot + ow reads tap (c, i, j) at plane[offset(c, i, j) + q], offset =
// (c*Hp + i*d)*Wp + j*d: every tap's values for all positions are one contiguous run.
#pragma once
#include <cstdint>
#include <vector>

#include "core/half.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

struct WidePlane {
  int64_t images, Hp, Wp, slot;
  int64_t positions(const ConvGeometry& g) const { return g.OH * Wp; }  // q's range
  int64_t floats(const ConvGeometry& g) const { return g.C * Hp * Wp; }
};
WidePlane wide_plane(const ConvGeometry& g, int64_t images);

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

// A per-thread buffer whose zeros are written once per layout: laid out the same way again (the
// next part, the next step), only the values are overwritten -- clearing a part's plane every
// time cost a tenth of the weight gradient.
struct ZeroedScratch {
  std::vector<float> values;
  std::vector<int64_t> layout;  // what the zeros were written for
  // The buffer, at least `size` floats, all zero unless the last call had the same layout.
  float* prepare(int64_t size, const std::vector<int64_t>& for_layout);
};

}  // namespace hg::kernels::cpu
