// Scalar formulas of the activations, run by the CPU loop (kernels/cpu/elementwise_loop.h) and the
// CUDA kernel (kernels/cuda/elementwise.cuh). Each has the forward f(x) and the backward
// dx = f'(x) * g, written from x (or from y = f(x) where cheaper).
#pragma once
#include "kernels/math/common.h"

namespace hg::kernels::math {

// NOTE: relu(NaN) must be NaN, so the test is "x < 0 -> 0", not "x > 0 -> x".
struct Relu {
  template <class A> HG_HD static A fwd(A x) { return x < A(0) ? A(0) : x; }
  template <class A> HG_HD static A bwd(A x, A g) { return x > A(0) ? g : A(0); }
};

// relu with a slope for x < 0 (PyTorch's leaky_relu, ONNX LeakyRelu). Unlike relu it has a
// parameter, so fwd/bwd are members, not static. NaN stays NaN: NaN * slope is NaN. The backward
// is PyTorch's: the slope at x <= 0 (x = 0 included), g where x > 0.
struct LeakyRelu {
  double negative_slope = 0.01;
  template <class A> HG_HD A fwd(A x) const { return x > A(0) ? x : x * A(negative_slope); }
  template <class A> HG_HD A bwd(A x, A g) const { return x > A(0) ? g : g * A(negative_slope); }
};

struct Sigmoid {
  template <class A> HG_HD static A fwd(A x) { return A(1) / (A(1) + std::exp(-x)); }
  template <class A> HG_HD static A bwd_from_y(A y, A g) { return g * y * (A(1) - y); }
};

struct Tanh {
  template <class A> HG_HD static A fwd(A x) { return std::tanh(x); }
  template <class A> HG_HD static A bwd_from_y(A y, A g) { return g * (A(1) - y * y); }
};

struct Silu {  // x * sigmoid(x)
  template <class A> HG_HD static A fwd(A x) { return x / (A(1) + std::exp(-x)); }
  template <class A> HG_HD static A bwd(A x, A g) {
    const A s = A(1) / (A(1) + std::exp(-x));
    return g * s * (A(1) + x * (A(1) - s));
  }
};

// The exact GELU, x * Phi(x) with the normal CDF Phi (PyTorch's default, approximate='none').
struct Gelu {
  template <class A> HG_HD static A fwd(A x) { return A(0.5) * x * (A(1) + std::erf(x * A(0.70710678118654752440))); }
  template <class A> HG_HD static A bwd(A x, A g) {
    const A cdf = A(0.5) * (A(1) + std::erf(x * A(0.70710678118654752440)));
    const A pdf = std::exp(A(-0.5) * x * x) * A(0.39894228040143267794);  // 1/sqrt(2*pi)
    return g * (cdf + x * pdf);
  }
};

// PyTorch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (there
// exp would overflow, and the result is x to within rounding). The backward is sigmoid(beta x),
// written as PyTorch's kernel writes it (z / (z + 1) with z = exp(beta x)), 1 on the linear part.
// NaN takes the log branch (NaN > threshold is false), and log1p(exp(NaN)) is NaN.
struct Softplus {
  double beta = 1, threshold = 20;
  template <class A> HG_HD A fwd(A x) const {
    const A bx = x * A(beta);
    return bx > A(threshold) ? x : std::log1p(std::exp(bx)) / A(beta);
  }
  template <class A> HG_HD A bwd(A x, A g) const {
    const A bx = x * A(beta);
    if (bx > A(threshold)) return g;
    const A z = std::exp(bx);
    return g * z / (z + A(1));
  }
};

}  // namespace hg::kernels::math

namespace hg::kernels::math {
// Adapters that turn an activation's fwd/bwd into the functors the elementwise kernels take
// (CPU: kernels/cpu/elementwise_loop.h, CUDA: kernels/cuda/elementwise.cuh). They hold the activation, so
// one with a parameter (LeakyRelu's slope) travels into the kernel with it; `Forward<Relu>{}`
// holds an empty Relu.
template <class Op> struct Forward {
  Op op;
  template <class A> HG_HD A operator()(A x) const { return op.fwd(x); }
};
template <class Op> struct BackwardFromInput {
  Op op;
  template <class A> HG_HD A operator()(A x, A g) const { return op.bwd(x, g); }
};
template <class Op> struct BackwardFromOutput {
  Op op;
  template <class A> HG_HD A operator()(A y, A g) const { return op.bwd_from_y(y, g); }
};
}  // namespace hg::kernels::math
