// The weight gradient of stride-1 convolutions as dot products over wide rows, without im2col.
//
// dW[o][c][i][j] = sum over images and output pixels of dy[o][oh][ow] * xpad[c][oh + i*d][ow + j*d].
// Through im2col it is one GEMM, dW (O, C*kh*kw) = dy (O, pixels) @ cols^T, whose right operand
// has to be copied out kh*kw times and then transposed into panels -- with O = 16 (ResNet-20's
// first stage) each copied value takes part in only 32 flops, and the f32 weight gradient of its
// 16x28x28 layer ran at 30% of the FMA peak, the slowest of the layer's three products.
//
// Laid out as the wide-columns forward lays its input (kernels/cpu/conv_wide_columns.h: a part's
// images side by side in one zero-padded plane per channel, rows Wp wide), with dy in the same
// row pitch and zeros over the columns between images, every tap (c, i, j) becomes a plain
// offset into the plane, and each entry of dW a dot product of two contiguous rows:
//
//   dW[o][(c, i, j)] = sum over q of dyw[o][q] * plane[(c*Hp + i*d)*Wp + j*d + q]
//
// Both rows run along the same index q, so the products are vectorised along q: a block of
// RO x RT entries keeps one vector of partial sums each in registers, every vector of dy and of
// the plane loaded once per block and used RT (RO) times, and the vectors' lanes are added up
// at the end. No copy, packing or transposition beyond the one layout per part.
//
// NOTE: the products over dy's zero columns multiply real input values by zero, so an infinite
// or NaN input would turn entries NaN that im2col leaves finite; a part whose input holds one is
// computed on the valid pixels only, by plain loops (slow, and exact about which products count).
#pragma once
#include <cstdint>

#include "core/half.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

// Whether the wide-rows layout serves the geometry (wide_layout_serves: stride 1 with pad <=
// dilation * (kw - 1), or stride 2 through its phase planes; one group) and the CPU level has the
// kernel (AVX2 or AVX-512; elsewhere im2col + GEMM).
bool wide_weight_grad_applies(const ConvGeometry& g);

// dw (O * C*kh*kw values, w's layout) and db (O values), either may be null, of the convolution
// with input x (N, C, H, W) and output gradient dy (N, O, OH, OW), both contiguous T (f32, f16 or
// bf16: 16-bit values are widened as they are laid out). relu_output, when not null, is the
// forward's output y with the ReLU epilogue: dy counts only where y > 0. Results in f32, in an
// order that depends on the geometry and the CPU level, never on the thread count.
template <class T>
void conv2d_weight_grad_wide(const T* x, const T* dy, const T* relu_output, const ConvGeometry& g, float* dw,
                             float* db);

}  // namespace hg::kernels::cpu
