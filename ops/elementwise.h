// Elementwise arithmetic with NumPy broadcasting and PyTorch's type promotion
// (f16 + f32 -> f32, bf16 + f16 -> f32, int + float -> float; see promote_types in core/dtype.h).
// All are differentiable; a broadcast input gets its gradient summed back to its own shape.
#pragma once
#include <utility>

#include "core/tensor.h"

namespace hg {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

// With a scalar: the result keeps the tensor's dtype when it is floating (a "weak" scalar, as
// in PyTorch); an integer tensor with a fractional scalar gives f32.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor abs(const Tensor& x);
Tensor clamp(const Tensor& x, double min, double max);  // min > max: every element becomes max (PyTorch)

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// a where cond is nonzero, else b (cond, a and b broadcast together; a and b promoted). The
// gradient goes to the branch taken; the other branch gets 0, even where it holds inf or NaN.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

namespace detail {
// Device/dtype checks shared by the binary ops: same device, with torch's message.
void check_same_device(std::string_view op, const Tensor& a, const Tensor& b);
// Result dtype of `t op scalar`.
DType scalar_result_dtype(DType tensor_dtype, double scalar);
// Both operands cast (differentiably) to their promoted dtype, and the shape they broadcast to.
std::pair<Tensor, Tensor> promote_operands(std::string_view op, const Tensor& a, const Tensor& b, Shape* shape);
}  // namespace detail

}  // namespace hg
