// Stride-1 and stride-2 convolutions in f32 computed directly on wide rows: no im2col, no packing,
// no Winograd.
//
// The input is laid out as the wide-columns convolution lays it (kernels/cpu/conv_wide_columns.h:
// a part's images side by side in one zero-padded plane per channel, rows Wp wide), so that tap
// (c, i, j)'s values for every output position q = oh * Wp + x are the plane's contiguous run from
// offset (c*Hp + i*d)*Wp + j*d:
//
//   out[o][q] = bias[o] + sum over taps of w[o][tap] * plane[offset(tap) + q]
//
// A block of 8 output channels x 48 positions (AVX-512 where O is a multiple of 8, else 4 x 96;
// 4 x 24 on AVX2) keeps its sums in registers through all C*kh*kw taps, each tap one unaligned load per vector of positions, read
// straight from the plane, and one broadcast weight per channel. The columns over the zeros
// between images are computed and dropped (1/(W + pad) of them: 3% on 28x28, 7% on 14x14, 12%
// on 7x7). The same kernel computes the input gradient as the convolution of dy with the flipped
// weight (kernels/conv.cpp, input_grad_as_convolution), and a stride-2 convolution from the four
// phase planes of kernels/cpu/wide_rows.h (only the offsets differ).
//
// Why not Winograd F(2x2, 3x3), which multiplies 2.25x less: its transforms, gathers and 16 small
// GEMMs cost more than it saves where FMAs are this cheap (kernels/conv.cpp, use_wide_rows).
#pragma once
#include <cstdint>

#include "core/half.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

// Whether the wide-rows layout serves the geometry (wide_layout_serves: stride 1 with pad <=
// dilation * (kw - 1), or stride 2 through its phase planes; one group) and the CPU level has the
// kernel (AVX2 or AVX-512; elsewhere im2col + GEMM or Winograd).
bool wide_rows_apply(const ConvGeometry& g);

// out (N, O, OH, OW) = conv2d(x, w) + bias[o], then relu (NaN kept) when `relu`; x (N, C, H, W),
// w (O, C, kh, kw) and out contiguous T (f32, f16 or bf16: 16-bit values widened as they are laid
// out, results rounded once), bias f32 (O values). Only where wide_rows_apply.
template <class T>
void conv2d_wide_rows(const T* x, const T* w, const float* bias, T* out, const ConvGeometry& g, bool relu);

}  // namespace hg::kernels::cpu
