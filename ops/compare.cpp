// Comparisons and logic: the functor runs in the operands' promoted dtype (1 or 0 there, exact in
// every dtype), and the result is narrowed to a u8 mask. Nothing is recorded: masks have no
// gradient, and the operands are read detached so no graph reaches them.
#include "ops/compare.h"

#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "ops/elementwise.h"

namespace hg {

namespace {

template <class F>
Tensor compare(std::string_view op, const Tensor& a_in, const Tensor& b_in, F f) {
  HG_CHECK(a_in.defined() && b_in.defined(), op, ": expected two defined tensors");
  Shape shape;
  auto [a, b] = detail::promote_operands(op, a_in.detach(), b_in.detach(), &shape);
  return kernels::map_to_new<2>(shape, {a, b}, f).to(u8);
}

template <class F>
Tensor test(std::string_view op, const Tensor& x_in, F f) {
  HG_CHECK(x_in.defined(), op, ": expected a defined tensor");
  const Tensor x = x_in.detach();
  return kernels::map_to_new<1>(x.shape(), {x}, f).to(u8);
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", a, b, kernels::math::Equal{}); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", a, b, kernels::math::NotEqual{}); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", a, b, kernels::math::Less{}); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", a, b, kernels::math::LessEqual{}); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", a, b, kernels::math::Greater{}); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", a, b, kernels::math::GreaterEqual{}); }

Tensor logical_and(const Tensor& a, const Tensor& b) { return compare("logical_and", a, b, kernels::math::LogicalAnd{}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare("logical_or", a, b, kernels::math::LogicalOr{}); }
Tensor logical_not(const Tensor& x) { return test("logical_not", x, kernels::math::LogicalNot{}); }

Tensor isnan(const Tensor& x) { return test("isnan", x, kernels::math::IsNan{}); }
Tensor isinf(const Tensor& x) { return test("isinf", x, kernels::math::IsInf{}); }

}  // namespace hg
