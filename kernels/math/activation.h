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
  // (The slope is converted before the select: a conversion inside a branch may not be
  // speculated under -ftrapping-math, and the loop then stays scalar.)
  template <class A> HG_HD A fwd(A x) const {
    const A slope = A(negative_slope);
    return x > A(0) ? x : x * slope;
  }
  template <class A> HG_HD A bwd(A x, A g) const {
    const A slope = A(negative_slope);
    return x > A(0) ? g : g * slope;
  }
};

// prelu: leaky_relu whose slope w is a parameter, one per channel (the kernels broadcast w to x's
// shape). PyTorch's backward: dx = x > 0 ? g : w * g, dw = sum of (x > 0 ? 0 : x * g).
struct Prelu {
  template <class A> HG_HD A operator()(A x, A w) const { return x > A(0) ? x : x * w; }
};
struct PreluInputGrad {
  template <class A> HG_HD A operator()(A x, A w, A g) const { return x > A(0) ? g : g * w; }
};
struct PreluWeightGrad {
  template <class A> HG_HD A operator()(A x, A g) const { return x > A(0) ? A(0) : x * g; }
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


// ---- piecewise and exponential activations (PyTorch's definitions and derivatives) -------------
// NaN stays NaN in every forward: each test below is false for NaN, and the branch taken returns
// an expression of x.

// min(max(x, lo), hi); the gradient passes strictly inside (lo, hi), as PyTorch's hardtanh_backward.
// relu6 is Hardtanh{0, 6}.
struct Hardtanh {
  double min_val = -1, max_val = 1;
  template <class A> HG_HD A fwd(A x) const {
    const A lo = A(min_val), hi = A(max_val);  // converted before the select (see LeakyRelu)
    return x < lo ? lo : x > hi ? hi : x;
  }
  template <class A> HG_HD A bwd(A x, A g) const {
    const A lo = A(min_val), hi = A(max_val);
    return x > lo && x < hi ? g : A(0);
  }
};

// relu6(x + 3) / 6; slope 1/6 strictly inside (-3, 3).
struct Hardsigmoid {
  template <class A> HG_HD static A fwd(A x) { return x <= A(-3) ? A(0) : x >= A(3) ? A(1) : x / A(6) + A(0.5); }
  template <class A> HG_HD static A bwd(A x, A g) { return x > A(-3) && x < A(3) ? g / A(6) : A(0); }
};

// x * relu6(x + 3) / 6 (MobileNetV3), as PyTorch computes it: -inf * 0 is NaN there too.
// PyTorch's backward: 0 below -3, x/3 + 1/2 on [-3, 3], 1 above.
struct Hardswish {
  template <class A> HG_HD static A fwd(A x) {
    const A shifted = x + A(3);
    return x * (shifted < A(0) ? A(0) : shifted > A(6) ? A(6) : shifted) / A(6);
  }
  template <class A> HG_HD static A bwd(A x, A g) {
    return x < A(-3) ? A(0) : x <= A(3) ? g * (x / A(3) + A(0.5)) : g;
  }
};

// scale * (x where x > 0, else alpha * (exp(x / input_scale) - 1)): elu is {alpha, 1, 1}, selu
// {1.6733, 1.0507, 1}, celu {alpha, 1, 1 / alpha} (PyTorch's elu kernel, with its three parameters).
struct Elu {
  double alpha = 1, scale = 1, input_scale = 1;
  template <class A> HG_HD A fwd(A x) const {
    const A s = A(scale), a = A(alpha), k = A(input_scale);  // before the select (see LeakyRelu)
    return x > A(0) ? s * x : s * a * std::expm1(x * k);
  }
  template <class A> HG_HD A bwd(A x, A g) const {
    const A s = A(scale), a = A(alpha), k = A(input_scale);
    return x > A(0) ? g * s : g * s * a * k * std::exp(x * k);
  }
};
// SELU's constants (Klambauer et al. 2017), as PyTorch spells them.
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;

// x * tanh(softplus(x)) (Misra 2019); softplus as log1p(exp(x)), which reaches inf -> tanh 1.
struct Mish {
  template <class A> HG_HD static A fwd(A x) { return x * std::tanh(std::log1p(std::exp(x))); }
  template <class A> HG_HD static A bwd(A x, A g) {
    const A t = std::tanh(std::log1p(std::exp(x)));
    const A s = A(1) / (A(1) + std::exp(-x));
    return g * (t + x * s * (A(1) - t * t));
  }
};

// x / (1 + |x|).
struct Softsign {
  template <class A> HG_HD static A fwd(A x) { return x / (A(1) + std::abs(x)); }
  template <class A> HG_HD static A bwd(A x, A g) {
    const A d = A(1) + std::abs(x);
    return g / (d * d);
  }
};

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): no overflow for either sign.
struct LogSigmoid {
  template <class A> HG_HD static A fwd(A x) { return (x < A(0) ? x : A(0)) - std::log1p(std::exp(-std::abs(x))); }
  template <class A> HG_HD static A bwd(A x, A g) { return g / (A(1) + std::exp(x)); }  // g * sigmoid(-x)
};

// GELU's tanh approximation (PyTorch's approximate='tanh'):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <class A> HG_HD static A fwd(A x) {
    const A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
    return A(0.5) * x * (A(1) + std::tanh(inner));
  }
  template <class A> HG_HD static A bwd(A x, A g) {
    const A k = A(0.79788456080286535588);
    const A inner = k * (x + A(0.044715) * x * x * x);
    const A t = std::tanh(inner);
    const A d_inner = k * (A(1) + A(3) * A(0.044715) * x * x);
    return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * d_inner);
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
