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
// Sign with sign(0) = 0 (the subgradient PyTorch uses for abs at 0); sign(NaN) = 0 as PyTorch's.
struct Sign {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_unsigned_v<A>) return a > A(0) ? A(1) : A(0);
    else return a > A(0) ? A(1) : a < A(0) ? A(-1) : A(0);
  }
};

// ---- math functions (ops/math.cpp) ------------------------------------------------------------
struct Reciprocal { template <class A> HG_HD A operator()(A a) const { return A(1) / a; } };
struct Rsqrt { template <class A> HG_HD A operator()(A a) const { return A(1) / std::sqrt(a); } };
struct Log1p { template <class A> HG_HD A operator()(A a) const { return std::log1p(a); } };
struct Expm1 { template <class A> HG_HD A operator()(A a) const { return std::expm1(a); } };
struct Erf { template <class A> HG_HD A operator()(A a) const { return std::erf(a); } };
struct Sin { template <class A> HG_HD A operator()(A a) const { return std::sin(a); } };
struct Cos { template <class A> HG_HD A operator()(A a) const { return std::cos(a); } };
// Their gradients times g, from the input x and in one rounding: from a saved 16-bit output
// (-y^2, y + 1, ...) the output's rounding would be squared, cubed or cancelled, and a chain of
// 16-bit ops would round at each step.
struct ReciprocalGrad { template <class A> HG_HD A operator()(A x, A g) const { return -g / (x * x); } };
struct RsqrtGrad {
  template <class A> HG_HD A operator()(A x, A g) const { return A(-0.5) * g / (x * std::sqrt(x)); }
};
struct Expm1Grad { template <class A> HG_HD A operator()(A x, A g) const { return g * std::exp(x); } };
struct Log1pGrad { template <class A> HG_HD A operator()(A x, A g) const { return g / (A(1) + x); } };
struct ErfGrad {
  template <class A> HG_HD A operator()(A x, A g) const { return A(1.1283791670955126) * std::exp(-x * x) * g; }
};
struct SinGrad { template <class A> HG_HD A operator()(A x, A g) const { return g * std::cos(x); } };
struct CosGrad { template <class A> HG_HD A operator()(A x, A g) const { return -g * std::sin(x); } };
// Rounding to an integer value; an integer tensor is already one.
struct Floor {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_integral_v<A>) return a;
    else return std::floor(a);
  }
};
struct Ceil {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_integral_v<A>) return a;
    else return std::ceil(a);
  }
};
// Halves go to the even neighbour (PyTorch's and IEEE's default), not away from zero as std::round.
struct Round {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_integral_v<A>) return a;
    else return std::nearbyint(a);
  }
};
// a^b for two tensors, and its two partial derivatives times g. d/db is a^b log a, 0 where a = 0
// and b >= 0 (PyTorch's: 0^b log 0 would be 0 * -inf).
struct PowTensor { template <class A> HG_HD A operator()(A a, A b) const { return std::pow(a, b); } };
struct PowBaseGrad {
  template <class A> HG_HD A operator()(A a, A b, A g) const { return b == A(0) ? A(0) : b * std::pow(a, b - A(1)) * g; }
};
struct PowExponentGrad {
  template <class A> HG_HD A operator()(A a, A b, A g) const {
    return (a == A(0) && b >= A(0)) ? A(0) : std::pow(a, b) * std::log(a) * g;
  }
};
// clamp(x, lo, hi) with tensor bounds: max(x, lo), then min(., hi) -- lo > hi gives hi (PyTorch).
// NaN in x stays NaN (both comparisons are false).
struct ClampTensor {
  template <class A> HG_HD A operator()(A x, A lo, A hi) const {
    const A y = x < lo ? lo : x;
    return y > hi ? hi : y;
  }
};
// Where the gradient of clamp(x, lo, hi) goes (PyTorch's clamp_backward_min_max): to x where
// lo <= x <= hi, to lo where x < lo, to hi where x > hi -- and where lo > hi the output is hi
// whatever x and lo are, so all of it goes to hi.
struct ClampInsideGrad {
  template <class A> HG_HD A operator()(A x, A lo, A hi, A g) const { return (x >= lo && x <= hi) ? g : A(0); }
};
struct ClampLowGrad {
  template <class A> HG_HD A operator()(A x, A lo, A hi, A g) const { return (x < lo && lo < hi) ? g : A(0); }
};
struct ClampHighGrad {
  template <class A> HG_HD A operator()(A x, A lo, A hi, A g) const { return (x > hi || hi < lo) ? g : A(0); }
};
// maximum / minimum: NaN in either operand gives NaN (std::max would drop one of them).
struct Maximum {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return (a != a || a > b) ? a : (b != b || b > a) ? b : a; }
};
struct Minimum {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return (a != a || a < b) ? a : (b != b || b < a) ? b : a; }
};
// The share of g that maximum(a, b) gives to a: all of it where a wins, half on a tie (PyTorch's).
// minimum's is the same with the operands' roles read the other way (MinShare).
struct MaxShare {
  template <class A> HG_HD A operator()(A a, A b, A g) const { return a > b ? g : a == b ? g * A(0.5) : A(0); }
};
struct MinShare {
  template <class A> HG_HD A operator()(A a, A b, A g) const { return a < b ? g : a == b ? g * A(0.5) : A(0); }
};

// ---- comparisons and logic (ops/compare.cpp): 1 or 0 in the operands' dtype, then made a u8 mask.
struct NotEqual {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a != b ? A(1) : A(0); }
};
struct Less {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a < b ? A(1) : A(0); }
};
struct LessEqual {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a <= b ? A(1) : A(0); }
};
struct Greater {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a > b ? A(1) : A(0); }
};
struct GreaterEqual {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return a >= b ? A(1) : A(0); }
};
// Nonzero is true; NaN is nonzero, so true (C's and PyTorch's rule).
struct LogicalAnd {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return (a != A(0) && b != A(0)) ? A(1) : A(0); }
};
struct LogicalOr {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a, A b) const { return (a != A(0) || b != A(0)) ? A(1) : A(0); }
};
struct LogicalNot {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const { return a == A(0) ? A(1) : A(0); }
};
struct IsNan {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const { return a != a ? A(1) : A(0); }
};
struct IsInf {
  static constexpr bool integer_safe = true;
  template <class A> HG_HD A operator()(A a) const {
    if constexpr (std::is_integral_v<A>) return A(0);
    else return (a == A(INFINITY) || a == A(-INFINITY)) ? A(1) : A(0);
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
