// The conv2d kernels of ops/conv.cpp, on the input's device: im2col + the packed GEMM on the CPU,
// cuDNN on a GPU; an optional ReLU epilogue. They record nothing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hg::kernels {

// One convolution: input (N, C, H, W), weight (O, C / groups, kh, kw), output (N, O, OH, OW).
// Kernel taps sit `dilation` pixels apart. With groups > 1, the channels split into `groups`
// equal slices, and output slice k sees only input slice k (groups == C: depthwise).
struct ConvGeometry {
  int64_t N, C, H, W, O, kh, kw, stride, pad, OH, OW;
  int64_t dilation = 1, groups = 1;
  int64_t group_in() const { return C / groups; }    // input channels per group
  int64_t group_out() const { return O / groups; }   // output channels per group
  int64_t ckk() const { return group_in() * kh * kw; }  // the GEMM depth: one weight row
  int64_t ohw() const { return OH * OW; }
  // One group's convolution on its own: C and O of one slice, groups = 1.
  ConvGeometry one_group() const {
    ConvGeometry g = *this;
    g.C = group_in();
    g.O = group_out();
    g.groups = 1;
    return g;
  }
};

// The bias as O values of S for a CPU kernel to add: b's values (b may be a strided view), or
// zeros where b is undefined.
template <class S>
std::vector<S> bias_values(const Tensor& b, int64_t O) {
  std::vector<S> bias(static_cast<size_t>(O), S(0));
  if (b.defined()) {
    const std::vector<double> values = b.to_vector<double>();
    std::copy(values.begin(), values.end(), bias.begin());
  }
  return bias;
}

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

// conv2d's input gradient alone, from a gradient (N, O, OH, OW), plus bias[c] on channel c (bias
// may be undefined): conv_transpose2d's forward.
Tensor conv2d_input_grad(const Tensor& w, const Tensor& grad, const Tensor& bias, const ConvGeometry& g);

}  // namespace hg::kernels
