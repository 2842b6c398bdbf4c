// Scalar formulas of the elementwise ops (ops/elementwise.cpp, kernels/cuda/elementwise.cuh).
// A is the compute type: float for f32/f16/bf16 storage, double for f64.
#pragma once
#include <type_traits>

#include "kernels/math/common.h"

namespace hg::kernels::math {

// A functor that makes sense on integer tensors says so with `static constexpr bool integer_safe
// = true`; the others run on floating dtypes only (GELU's 1/sqrt(2), a division or exp have no
// integer meaning here), and an integer tensor handed to them is an hg::Error on both devices.
template <class F>
inline constexpr bool kIntegerSafe = requires { requires F::integer_safe; };

struct Add {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a + b; }
};
struct Sub {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a - b; }
};
struct Mul {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a * b; }
};
struct Div { template <class A> HG_HD A operator()(A a, A b) const { return a / b; } };
struct Neg {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const { return -a; }
};
struct Exp { template <class A> HG_HD A operator()(A a) const { return std::exp(a); } };
struct Log { template <class A> HG_HD A operator()(A a) const { return std::log(a); } };
struct Sqrt { template <class A> HG_HD A operator()(A a) const { return std::sqrt(a); } };
struct Abs {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_unsigned_v<A>) return a;
    else return a < A(0) ? -a : a;
  }
};
// Sign with sign(0) = 0 (the subgradient PyTorch uses for abs at 0). NaN stays NaN.
struct Sign {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_unsigned_v<A>) return a > A(0) ? A(1) : A(0);
    else return a > A(0) ? A(1) : a < A(0) ? A(-1) : a * A(0);
  }
};

struct AddScalar {
  static constexpr bool integer_safe = true;
  double s; template <class A> HG_HD A operator()(A a) const { return a + A(s); }
};
struct MulScalar {
  static constexpr bool integer_safe = true;
  double s; template <class A> HG_HD A operator()(A a) const { return a * A(s); }
};
struct DivScalar { double s; template <class A> HG_HD A operator()(A a) const { return a / A(s); } };
struct PowScalar {
  double exponent;
  template <class A> HG_HD A operator()(A a) const {
    if (exponent == 2.0) return a * a;  // the common case, exact and fast
    return std::pow(a, A(exponent));
  }
};
// d/da a^e = e * a^(e-1), written with PowScalar so e = 1 or 2 stay exact.
struct PowScalarGrad {
  double exponent;
  template <class A> HG_HD A operator()(A a, A g) const {
    if (exponent == 0.0) return A(0);
    if (exponent == 2.0) return A(2) * a * g;
    return A(exponent) * std::pow(a, A(exponent - 1.0)) * g;
  }
};
// NOTE: NaN must survive clamping (std::min/max would drop it): comparisons with NaN are false.
struct Clamp {
  double lo, hi;
  template <class A> HG_HD A operator()(A a) const { return a < A(lo) ? A(lo) : a > A(hi) ? A(hi) : a; }
};
// Gradient passes where lo <= a <= hi (PyTorch's convention at the bounds).
struct ClampGrad {
  double lo, hi;
  template <class A> HG_HD A operator()(A a, A g) const { return (a >= A(lo) && a <= A(hi)) ? g : A(0); }
};
// d(a/b)/db * g = -g * a / b^2, in one rounding (a chain of 16-bit ops would round three times).
struct DivGradDenominator {
  template <class A> HG_HD A operator()(A a, A b, A g) const { return -g * a / (b * b); }
};
// 1.0 where a == b, else 0.0 (masks for amax's backward).
struct Equal {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a == b ? A(1) : A(0); }
};

// where(cond, a, b): a where cond is nonzero, else b -- a choice, not arithmetic, so a NaN or inf
// in the branch not taken never reaches the result (0 * inf would).
struct Select {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A cond, A a, A b) const { return cond != A(0) ? a : b; }
};

}  // namespace hg::kernels::math

namespace hg::kernels::math {
// a + alpha * b: the in-place accumulation behind Tensor::add_ (gradients, optimizers).
struct AddScaled {
  static constexpr bool integer_safe = true;
  double alpha;
  template <class A> HG_HD A operator()(A a, A b) const { return a + A(alpha) * b; }
};
}  // namespace hg::kernels::math
