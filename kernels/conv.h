// The conv2d kernels of ops/conv.cpp, on the input's device: im2col + the packed GEMM on the CPU,
// cuDNN on a GPU; an optional ReLU epilogue. They record nothing.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::kernels {

// One convolution: input (N, C, H, W), weight (O, C, kh, kw), output (N, O, OH, OW).
struct ConvGeometry {
  int64_t N, C, H, W, O, kh, kw, stride, pad, OH, OW;
  int64_t ckk() const { return C * kh * kw; }
  int64_t ohw() const { return OH * OW; }
};

// out = conv2d(x, w) + b (b may be undefined), then relu(out) when `relu`; x and w contiguous,
// all of one floating dtype.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool relu);

// The gradients asked for (the others stay undefined). y is the forward's output when its ReLU
// epilogue ran (its derivative masks grad first), else undefined; w is needed only for x's gradient.
struct Conv2dGrads {
  Tensor x, w, b;
};
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& grad, const Tensor& y,
                            const ConvGeometry& g, bool need_x, bool need_w, bool need_b);

}  // namespace hg::kernels
