// Math functions (ops/math.h). Each: amp::prepare -> kernels::map_to_new over a functor of
// kernels/math/elementwise.h -> record the backward, written with the same functors where one
// pass does: one rounding of a 16-bit gradient, not one per step of a chain of ops.
#include "ops/math.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "ops/elementwise.h"
#include "ops/record.h"
#include "ops/reduce.h"

namespace hg {

namespace {

using kernels::map_to_new;

// A unary floating op whose gradient is g times a function of its input, both one functor:
// prepare, check the dtype, map, and record the backward as Grad(x, g).
template <class F, class Grad>
Tensor differentiable_unary(amp::Op op, const Tensor& x_in, F f, Grad grad) {
  auto [x] = amp::prepare(op, x_in);
  HG_CHECK(is_floating(x.dtype()), amp::op_name(op), ": expected a floating tensor, got ", x.dtype(),
           " (convert with .to(hg::f32) first)");
  Tensor out = map_to_new<1>(x.shape(), {x}, f);
  record(op, out, {x}, [sx = SavedTensor(x), grad](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {map_to_new<2>(x.shape(), {x, g}, grad)};
  });
  return out;
}

// floor / ceil / round / sign: piecewise constant, so the gradient is zero (PyTorch's), recorded
// so that a graph through them still reaches its leaves. Integer tensors pass through unchanged.
template <class F>
Tensor step_function(amp::Op op, const Tensor& x_in, F f) {
  auto [x] = amp::prepare(op, x_in);
  Tensor out = map_to_new<1>(x.shape(), {x}, f);
  if (is_floating(x.dtype()))
    record(op, out, {x}, [](const Tensor& g) -> std::vector<Tensor> { return {zeros_like(g)}; });
  return out;
}

}  // namespace

Tensor reciprocal(const Tensor& x) {
  return differentiable_unary(amp::Op::Reciprocal, x, kernels::math::Reciprocal{}, kernels::math::ReciprocalGrad{});
}
Tensor rsqrt(const Tensor& x) {
  return differentiable_unary(amp::Op::Rsqrt, x, kernels::math::Rsqrt{}, kernels::math::RsqrtGrad{});
}
Tensor log1p(const Tensor& x) {
  return differentiable_unary(amp::Op::Log1p, x, kernels::math::Log1p{}, kernels::math::Log1pGrad{});
}
Tensor expm1(const Tensor& x) {
  return differentiable_unary(amp::Op::Expm1, x, kernels::math::Expm1{}, kernels::math::Expm1Grad{});
}
Tensor erf(const Tensor& x) { return differentiable_unary(amp::Op::Erf, x, kernels::math::Erf{}, kernels::math::ErfGrad{}); }
Tensor sin(const Tensor& x) { return differentiable_unary(amp::Op::Sin, x, kernels::math::Sin{}, kernels::math::SinGrad{}); }
Tensor cos(const Tensor& x) { return differentiable_unary(amp::Op::Cos, x, kernels::math::Cos{}, kernels::math::CosGrad{}); }

Tensor sign(const Tensor& x) { return step_function(amp::Op::Sign, x, kernels::math::Sign{}); }
Tensor floor(const Tensor& x) { return step_function(amp::Op::Floor, x, kernels::math::Floor{}); }
Tensor ceil(const Tensor& x) { return step_function(amp::Op::Ceil, x, kernels::math::Ceil{}); }
Tensor round(const Tensor& x) { return step_function(amp::Op::Round, x, kernels::math::Round{}); }

// ---- two operands ------------------------------------------------------------------------------

namespace {

// maximum / minimum: the winner takes the gradient, a tie splits it (share = MaxShare / MinShare).
template <class F, class Share>
Tensor extremum(amp::Op op, const Tensor& a_in, const Tensor& b_in, F f, Share share) {
  auto [a0, b0] = amp::prepare(op, a_in, b_in);
  Shape shape;
  auto [a, b] = detail::promote_operands(amp::op_name(op), a0, b0, &shape);
  Tensor out = map_to_new<2>(shape, {a, b}, f);
  if (!is_floating(out.dtype())) return out;
  record(op, out, {a, b}, [sa = SavedTensor(a), sb = SavedTensor(b), shape, share](const Tensor& g) {
    const Tensor a = sa.get(), b = sb.get();
    return std::vector<Tensor>{sum_to(map_to_new<3>(shape, {a, b, g}, share), a.shape()),
                               sum_to(map_to_new<3>(shape, {b, a, g}, share), b.shape())};
  });
  return out;
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(amp::Op::Maximum, a, b, kernels::math::Maximum{}, kernels::math::MaxShare{});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(amp::Op::Minimum, a, b, kernels::math::Minimum{}, kernels::math::MinShare{});
}

Tensor pow(const Tensor& base_in, const Tensor& exponent_in) {
  auto [base0, exponent0] = amp::prepare(amp::Op::Pow, base_in, exponent_in);
  Shape shape;
  auto [a, b] = detail::promote_operands("pow", base0, exponent0, &shape);
  HG_CHECK(is_floating(a.dtype()), "pow: expected floating tensors, got ", base_in.dtype(), " and ",
           exponent_in.dtype(), " (convert with .to(hg::f32) first)");
  Tensor out = map_to_new<2>(shape, {a, b}, kernels::math::PowTensor{});
  record(amp::Op::Pow, out, {a, b}, [sa = SavedTensor(a), sb = SavedTensor(b), shape](const Tensor& g) {
    const Tensor a = sa.get(), b = sb.get();
    return std::vector<Tensor>{sum_to(map_to_new<3>(shape, {a, b, g}, kernels::math::PowBaseGrad{}), a.shape()),
                               sum_to(map_to_new<3>(shape, {a, b, g}, kernels::math::PowExponentGrad{}), b.shape())};
  });
  return out;
}

Tensor clamp(const Tensor& x_in, const Tensor& min_in, const Tensor& max_in) {
  HG_CHECK(x_in.defined() && min_in.defined() && max_in.defined(),
           "clamp: expected defined tensors for x, min and max (for one bound, use maximum or minimum)");
  auto [x0, lo0, hi0] = amp::prepare(amp::Op::Clamp, x_in, min_in, max_in);
  HG_CHECK(is_floating(x0.dtype()), "clamp: expected a floating tensor, got ", x0.dtype(),
           " (convert with .to(hg::f32) first)");
  detail::check_same_device("clamp", x0, lo0);
  detail::check_same_device("clamp", x0, hi0);
  const DType dtype = promote_types(promote_types(x0.dtype(), lo0.dtype()), hi0.dtype());
  const Shape shape =
      broadcast_shapes(broadcast_shapes(x0.shape(), lo0.shape(), "clamp"), hi0.shape(), "clamp");
  const Tensor x = x0.to(dtype), lo = lo0.to(dtype), hi = hi0.to(dtype);
  Tensor out = map_to_new<3>(shape, {x, lo, hi}, kernels::math::ClampTensor{});
  record(amp::Op::Clamp, out, {x, lo, hi},
         [sx = SavedTensor(x), slo = SavedTensor(lo), shi = SavedTensor(hi), shape](const Tensor& g) {
           const Tensor x = sx.get(), lo = slo.get(), hi = shi.get();
           return std::vector<Tensor>{
               sum_to(map_to_new<4>(shape, {x, lo, hi, g}, kernels::math::ClampInsideGrad{}), x.shape()),
               sum_to(map_to_new<4>(shape, {x, lo, hi, g}, kernels::math::ClampLowGrad{}), lo.shape()),
               sum_to(map_to_new<4>(shape, {x, lo, hi, g}, kernels::math::ClampHighGrad{}), hi.shape())};
         });
  return out;
}

}  // namespace hg
