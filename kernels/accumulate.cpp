#include "kernels/accumulate.h"

#include "core/copy.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"

namespace hg::kernels {

Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  detail::copy_into(out, t);
  return out;
}

Tensor copied(const Tensor& t) { return converted(t, t.dtype()); }

Tensor added(const Tensor& a, const Tensor& b) {
  const DType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor a_ = a.dtype() == dtype ? a : converted(a, dtype), b_ = b.dtype() == dtype ? b : converted(b, dtype);
  return kernels::map_to_new<2>(broadcast_shapes(a.shape(), b.shape(), "add"), {a_, b_}, math::Add{});
}

void add_into(const Tensor& dst, const Tensor& src) {
  const Tensor b = src.dtype() == dst.dtype() ? src : converted(src, dst.dtype());
  kernels::map_into<2>(dst, {dst, b}, math::Add{});
  dst.impl()->storage->bump_version();
}

}  // namespace hg::kernels
