// Depthwise convolution on the CPU: each output channel reads one input channel (groups == C,
// MobileNet's 3x3 layers). im2col + GEMM would multiply a 1 x 9 weight row by a 9 x OH*OW column
// matrix per channel -- a GEMM with one row, mostly time spent laying out the columns. Here each
// channel's plane is padded once and every tap adds a shifted row of it, scaled by the tap's
// weight, into the output row: a loop the compiler vectorises along the row.
#pragma once
#include "core/tensor.h"
#include "kernels/conv.h"

namespace hg::kernels::cpu {

// Whether the depthwise kernels take this convolution: one input channel per group, more than
// one group (a single-channel input with groups == 1 stays an ordinary GEMM).
inline bool is_depthwise(const ConvGeometry& g) { return g.groups > 1 && g.group_in() == 1; }

// out (N, O, OH, OW) = the depthwise convolution of x with w (O, 1, kh, kw) (+ b), then relu
// when `relu`; x, w contiguous, one floating dtype; out allocated.
void depthwise_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g,
                      bool relu);

// The gradients asked for (null pointers are skipped) from dy (N, O, OH, OW), dense.
void depthwise_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const ConvGeometry& g, Tensor* gx,
                               Tensor* gw, Tensor* gb);

}  // namespace hg::kernels::cpu
