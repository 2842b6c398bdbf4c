// Winograd F(2x2, 3x3) convolution on the CPU, for 3x3 stride-1 convolutions (ResNet's):
//
//   if (cpu::winograd_applies(g)) cpu::winograd_conv2d(x, w, b, out, g, relu);
//
// Each 2x2 block of output pixels (a tile) is computed from the 4x4 input patch under it with 16
// multiplications per (input, output) channel pair instead of 36: the patch d and the filter g are
// transformed (V = B^T d B, U = G g G^T), multiplied element by element, and transformed back
// (Y = A^T (U . V) A). Summed over the input channels, each of the 16 element positions is one
// GEMM, M[xi] (O, tiles) = U[xi] (O, C) @ V[xi] (C, tiles), on the packed GEMM of the CPU level in
// use (kernels/cpu/gemm.h) -- 2.25x fewer multiply-adds than im2col + GEMM. kernels/conv.cpp
// decides where it is faster (its dispatch rule says by how much).
#pragma once
#include "core/tensor.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

// Whether the Winograd kernels can compute this convolution: 3x3, stride 1, dilation 1, one
// group, padding at most 2 (the input gradient's padding is 2 - pad), f32 or 16-bit data.
bool winograd_applies(const ConvGeometry& g, DType dtype);

// out (N, O, OH, OW) = conv2d(x, w) + b (b may be undefined), then relu when `relu`; x and w
// contiguous, one dtype; out allocated. 16-bit data is computed in f32 and rounded once.
void winograd_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g,
                     bool relu);

// dx (N, C, H, W) = conv2d's input gradient from dy (N, O, OH, OW), dense: the 3x3 convolution of
// dy, padded by 2 - pad, with the weight flipped and its channel axes swapped; dx allocated.
void winograd_conv2d_input_grad(const Tensor& w, const Tensor& dy, const ConvGeometry& g, const Tensor& dx);

// kernels::conv2d and conv2d_backward with the CPU algorithm named, for the tests and benchmarks
// that compare the two (defined in kernels/conv.cpp, whose Auto rule the kernels use): Winograd
// where winograd_applies, else an hg::Error; Im2col always. The input gradient is the only one
// Winograd computes.
// Im2colFlipped: Im2col, except that with stride 1 the input gradient is the convolution of the
// gradient with the flipped weight (im2col + GEMM of the gradient, no col2im).
// WideColumns: Im2colFlipped with its stride-1 GEMMs (the forward, the flipped input gradient)
// reading the padded images without im2col (kernels/conv.cpp's wide columns): bf16 on a CPU with
// native bf16 products only, else an hg::Error. Auto uses them wherever they apply.
// WideRows: the forward and the flipped input gradient as direct convolutions on wide rows
// (kernels/cpu/conv_wide_rows.h), the weight's and bias's gradients as dot products on them
// (kernels/cpu/conv_weight_grad.h); f32 GEMM panels at the AVX2 and AVX-512 levels, stride 1, one
// group, else an hg::Error. Auto uses them where kernels/conv.cpp measured them faster.
enum class ConvAlgorithm { Auto, Im2col, Winograd, Im2colFlipped, WideColumns, WideRows };
Tensor conv2d_with(ConvAlgorithm algorithm, const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g,
                   bool relu);
Conv2dGrads conv2d_backward_with(ConvAlgorithm algorithm, const Tensor& x, const Tensor& w, const Tensor& grad,
                                 const Tensor& y, const ConvGeometry& g, bool need_x, bool need_w, bool need_b);

}  // namespace hg::kernels::cpu
