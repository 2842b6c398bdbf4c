// Stride-1 and stride-2 bf16 convolutions without im2col, on CPUs that multiply bf16 pairs natively.
//
// im2col copies each input value kh*kw times, and the GEMM then reads the copies once more to pack
// them (ResNet-20's bf16 step: 22% of its time in im2col, 9% in packing). With stride 1 the
// copies are not needed. A batch of images is laid side by side in one zero-padded plane per
// channel, neighbours sharing their `pad` zero columns:
//
//   row h of channel c:   [pad zeros][image 0, row h][pad zeros][image 1, row h] ... [pad zeros]
//
// and the output is computed over the plane's whole width Wp: output (oh, x) reads the plane at
// (oh + i*d, x + j*d) for tap (i, j), so the GEMM's B row of tap (c, i, j) is the plane itself
// from offset (c*Hp + i*d)*Wp + j*d on -- a view with one offset per row
// (cpu::MatrixView::row_offsets) that the GEMM's pair packer reads straight from the plane.
// Image b's outputs are the columns b*(W + pad) + ow, ow < OW; the columns over the zeros between
// images are computed and dropped (OH*Wp columns against images*OH*OW: 7% more on a 28x28 map,
// 10% on 14x14 with two images, 16% on 7x7 with eight). Each output sees the same products in
// the same order as through im2col, so the results are bitwise im2col's. Stride 2 lays the
// input out as four phase planes per channel (kernels/cpu/wide_rows.h): each tap's row is again
// one offset into them, and only the offsets change.
#pragma once
#include <cstdint>

#include "core/half.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

// Whether the geometry allows it: the wide-rows layout serves it (wide_layout_serves: stride 1
// with pad <= dilation * (kw - 1), or stride 2 without dilation; one group), and it is not a 1x1
// convolution without padding (whose image already is its column matrix).
bool wide_columns_apply(const ConvGeometry& g);
// Whether this CPU level can: native bf16 products in the packed GEMM, on x86.
bool wide_columns_available();

// out (N, O, OH, OW) = conv2d(x, w) + bias[o], then relu (NaN kept) when `relu`; x (N, C, H, W)
// and w (O, C, kh, kw) contiguous bf16, bias f32 (O values), `images` side by side per plane.
// Only where wide_columns_apply and wide_columns_available.
void conv2d_wide_columns(const bfloat16* x, const bfloat16* w, const float* bias, bfloat16* out, const ConvGeometry& g,
                         bool relu, int64_t images);

// The weight and bias gradients the same way: dW (O x C*kh*kw) and db (O values), f32, either may
// be null, of the convolution with input x (N, C, H, W) and output gradient dy (N, O, OH, OW),
// both contiguous bf16; relu_output, when not null, is the forward's output with the ReLU
// epilogue (dy counts only where it is > 0). Per part of a few images: the plane as the forward
// lays it, dy in its row pitch with zeros over the columns between images, and
//
//   dW^T (taps x O) = taps (taps x OH*Wp: the plane through per-tap row offsets) @ dy^T
//
// in the packed bf16 GEMM -- no im2col, and only dy (O rows, not C*kh*kw) transposed into pairs.
// Parts' sums are added in part order (the result does not depend on the thread count). NOTE: as
// in kernels/cpu/conv_weight_grad.h, the zero columns multiply real input values by zero, so a
// part whose sums come out infinite or NaN is recomputed on the valid pixels only.
// Only where wide_columns_apply and wide_columns_available.
void conv2d_weight_grad_wide_columns(const bfloat16* x, const bfloat16* dy, const bfloat16* relu_output,
                                     const ConvGeometry& g, float* dw, float* db);

}  // namespace hg::kernels::cpu
