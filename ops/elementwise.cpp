// Elementwise arithmetic: add sub mul div (tensor and scalar), neg exp log sqrt pow abs clamp.
// Each op: check -> amp::prepare -> kernel (kernels::map_to_new over a functor of
// kernels/math/elementwise.h, on the input's device) -> record the backward written right below.
#include "ops/elementwise.h"

#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "kernels/vectorised_activation.h"
#include "ops/reduce.h"
#include "ops/record.h"

namespace hg {


namespace detail {

void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  HG_CHECK(a.device() == b.device(), op, ": expected all tensors to be on the same device, but found at least "
           "two devices, ", a.device(), " and ", b.device(), "!");
}

DType scalar_result_dtype(DType tensor_dtype, double scalar) {
  if (is_floating(tensor_dtype)) return tensor_dtype;
  return scalar == std::trunc(scalar) ? tensor_dtype : f32;
}

std::pair<Tensor, Tensor> promote_operands(std::string_view op, const Tensor& a, const Tensor& b, Shape* shape) {
  check_same_device(op, a, b);
  *shape = broadcast_shapes(a.shape(), b.shape(), op);
  const DType dtype = promote_types(a.dtype(), b.dtype());
  return {a.to(dtype), b.to(dtype)};
}

}  // namespace detail

namespace {

using kernels::map_to_new;
using detail::promote_operands;

}  // namespace

// ---- add / sub ---------------------------------------------------------------------------------

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  auto [a0, b0] = amp::prepare(amp::Op::Add, a_in, b_in);
  Shape shape;
  auto [a, b] = promote_operands("add", a0, b0, &shape);
  Tensor out = map_to_new<2>(shape, {a, b}, kernels::math::Add{});
  record(amp::Op::Add, out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, sa), sum_to(g, sb)};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  auto [a0, b0] = amp::prepare(amp::Op::Sub, a_in, b_in);
  Shape shape;
  auto [a, b] = promote_operands("sub", a0, b0, &shape);
  Tensor out = map_to_new<2>(shape, {a, b}, kernels::math::Sub{});
  record(amp::Op::Sub, out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, sa), sum_to(neg(g), sb)};
  });
  return out;
}

// ---- mul / div ---------------------------------------------------------------------------------

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  auto [a0, b0] = amp::prepare(amp::Op::Mul, a_in, b_in);
  Shape shape;
  auto [a, b] = promote_operands("mul", a0, b0, &shape);
  Tensor out = map_to_new<2>(shape, {a, b}, kernels::math::Mul{});
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record(amp::Op::Mul, out, {a, b},
         [sa = SavedTensor(need_b ? a : Tensor()), sb = SavedTensor(need_a ? b : Tensor()),
          shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) -> std::vector<Tensor> {
           return {sb.defined() ? sum_to(g * sb.get(), shape_a) : Tensor(),
                   sa.defined() ? sum_to(g * sa.get(), shape_b) : Tensor()};
         });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  auto [a0, b0] = amp::prepare(amp::Op::Div, a_in, b_in);
  Shape shape;
  auto [a, b] = promote_operands("div", a0, b0, &shape);
  HG_CHECK(is_floating(a.dtype()), "div: integer division is not supported (got ", a.dtype(),
           "); convert to a floating dtype first");
  Tensor out = map_to_new<2>(shape, {a, b}, kernels::math::Div{});
  record(amp::Op::Div, out, {a, b},
         [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) -> std::vector<Tensor> {
           const Tensor a = sa.get(), b = sb.get();
           const Shape& shape = g.shape();
           return {sum_to(g / b, a.shape()), sum_to(map_to_new<3>(shape, {a, b, g}, kernels::math::DivGradDenominator{}), b.shape())};
         });
  return out;
}

// ---- with a scalar -----------------------------------------------------------------------------

namespace {
template <class F>
Tensor scalar_op(amp::Op op, const Tensor& x_in, double s, const F& f, double grad_factor) {
  auto [x0] = amp::prepare(op, x_in);
  const Tensor x = x0.to(detail::scalar_result_dtype(x0.dtype(), s));
  Tensor out = map_to_new<1>(x.shape(), {x}, f);
  record(op, out, {x}, [grad_factor](const Tensor& g) -> std::vector<Tensor> {
    return {grad_factor == 1.0 ? g : g * grad_factor};
  });
  return out;
}
}  // namespace

Tensor add(const Tensor& a, double b) { return scalar_op(amp::Op::Add, a, b, kernels::math::AddScalar{b}, 1.0); }
Tensor sub(const Tensor& a, double b) { return scalar_op(amp::Op::Sub, a, -b, kernels::math::AddScalar{-b}, 1.0); }
Tensor mul(const Tensor& a, double b) { return scalar_op(amp::Op::Mul, a, b, kernels::math::MulScalar{b}, b); }
Tensor div(const Tensor& a, double b) {
  const Tensor x = is_floating(a.dtype()) ? a : a.to(f32);  // division never stays integer
  return scalar_op(amp::Op::Div, x, b, kernels::math::DivScalar{b}, 1.0 / b);
}

// ---- unary -------------------------------------------------------------------------------------

Tensor neg(const Tensor& x_in) {
  auto [x] = amp::prepare(amp::Op::Neg, x_in);
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::Neg{});
  record(amp::Op::Neg, out, {x}, [](const Tensor& g) -> std::vector<Tensor> { return {neg(g)}; });
  return out;
}

Tensor exp(const Tensor& x_in) {
  auto [x] = amp::prepare(amp::Op::Exp, x_in);
  HG_CHECK(is_floating(x.dtype()), "exp: expected a floating tensor, got ", x.dtype());
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::Exp{});
  record(amp::Op::Exp, out, {x}, [y = SavedTensor(out)](const Tensor& g) -> std::vector<Tensor> {
    return {g * y.get()};
  });
  return out;
}

Tensor log(const Tensor& x_in) {
  auto [x] = amp::prepare(amp::Op::Log, x_in);
  HG_CHECK(is_floating(x.dtype()), "log: expected a floating tensor, got ", x.dtype());
  // CPU f32/f16/bf16: the vectorised log (kernels/cpu/vector_math.h, within 1 ulp of logf measured).
  Tensor out = kernels::activation_vectorised(x) ? kernels::log_forward_cpu(x)
                                                 : map_to_new<1>(x.shape(), {x}, kernels::math::Log{});
  record(amp::Op::Log, out, {x}, [sx = SavedTensor(x)](const Tensor& g) -> std::vector<Tensor> {
    return {g / sx.get()};
  });
  return out;
}

Tensor sqrt(const Tensor& x_in) {
  auto [x] = amp::prepare(amp::Op::Sqrt, x_in);
  HG_CHECK(is_floating(x.dtype()), "sqrt: expected a floating tensor, got ", x.dtype());
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::Sqrt{});
  record(amp::Op::Sqrt, out, {x}, [y = SavedTensor(out)](const Tensor& g) -> std::vector<Tensor> {
    return {g / (y.get() * 2.0)};
  });
  return out;
}

Tensor pow(const Tensor& x_in, double exponent) {
  auto [x] = amp::prepare(amp::Op::Pow, x_in);
  HG_CHECK(is_floating(x.dtype()), "pow: expected a floating tensor, got ", x.dtype());
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::PowScalar{exponent});
  record(amp::Op::Pow, out, {x}, [sx = SavedTensor(x), exponent](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {map_to_new<2>(x.shape(), {x, g}, kernels::math::PowScalarGrad{exponent})};
  });
  return out;
}

Tensor abs(const Tensor& x_in) {
  auto [x] = amp::prepare(amp::Op::Abs, x_in);
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::Abs{});
  record(amp::Op::Abs, out, {x}, [sx = SavedTensor(x)](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {g * map_to_new<1>(x.shape(), {x}, kernels::math::Sign{})};
  });
  return out;
}

Tensor clamp(const Tensor& x_in, double min, double max) {
  auto [x] = amp::prepare(amp::Op::Clamp, x_in);
  HG_CHECK(is_floating(x.dtype()), "clamp: expected a floating tensor, got ", x.dtype(),
           " (convert with .to(hg::f32) first)");
  // NOTE: min > max is not an error: every element becomes max, as in PyTorch and ONNX. The
  // gradient (x inside [min, max]) is then zero everywhere, also as in PyTorch.
  Tensor out = map_to_new<1>(x.shape(), {x}, kernels::math::Clamp{min > max ? max : min, max});
  record(amp::Op::Clamp, out, {x}, [sx = SavedTensor(x), min, max](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {map_to_new<2>(x.shape(), {x, g}, kernels::math::ClampGrad{min, max})};
  });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  auto [a0, b0] = amp::prepare(amp::Op::Where, a_in, b_in);
  detail::check_same_device("where", cond, a0);
  Shape shape;
  auto [a, b] = promote_operands("where", a0, b0, &shape);
  shape = broadcast_shapes(shape, cond.shape(), "where");
  const Tensor c = cond.detach().to(a.dtype());  // 0 or not: exact in every dtype
  Tensor out = map_to_new<3>(shape, {c, a, b}, kernels::math::Select{});
  record(amp::Op::Where, out, {a, b}, [sc = SavedTensor(c), sa = a.shape(), sb = b.shape(), shape](const Tensor& g) {
    const Tensor c = sc.get(), none = zeros({}, g.options());
    return std::vector<Tensor>{sum_to(map_to_new<3>(shape, {c, g, none}, kernels::math::Select{}), sa),
                               sum_to(map_to_new<3>(shape, {c, none, g}, kernels::math::Select{}), sb)};
  });
  return out;
}

// ---- operators ---------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return mul(pow(b, -1.0), a); }
Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace hg
