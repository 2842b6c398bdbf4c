// In-place writes: zero_, fill_, copy_, add_, mul_. They are for optimizers, gradient
// accumulation and initialisation, so autograd does not record them: on a tensor that requires
// grad they are an error while grad mode is on (wrap them in NoGradGuard). Each bumps the
// storage's version counter, which is how backward notices a saved tensor was overwritten.
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/fill.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "ops/elementwise.h"

namespace hg {

namespace {
void check_writable(const Tensor& t, std::string_view op) {
  HG_CHECK(!(GradMode::is_enabled() && t.requires_grad()), op, ": in-place operation on a tensor that requires "
           "grad (shape ", t.shape(), "); wrap it in hg::NoGradGuard, or use the out-of-place op");
}

}  // namespace

Tensor& Tensor::fill_(double value) {
  check_writable(*this, "fill_");
  detail::fill(*this, value);
  impl()->storage->bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_writable(*this, "copy_");
  detail::copy_into(*this, src);
  impl()->storage->bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_writable(*this, "add_");
  detail::check_same_device("add_", *this, other);
  HG_CHECK(broadcast_shapes(shape(), other.shape(), "add_") == shape(), "add_: cannot add shape ", other.shape(),
           " into shape ", shape());
  HG_CHECK(is_floating(dtype()) || !is_floating(other.dtype()), "add_: result type ", other.dtype(),
           " can't be cast to the desired output type ", dtype(), " (an in-place op cannot narrow a float into an integer)");
  const Tensor b = other.detach().to(dtype());
  kernels::map_into<2>(*this, {*this, b}, kernels::math::AddScaled{alpha});
  impl()->storage->bump_version();
  return *this;
}

Tensor& Tensor::mul_(double factor) {
  check_writable(*this, "mul_");
  kernels::map_into<1>(*this, {*this}, kernels::math::MulScalar{factor});
  impl()->storage->bump_version();
  return *this;
}

}  // namespace hg
