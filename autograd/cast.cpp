// Tensor::to(DType) and Tensor::to(Device): differentiable copies. The gradient goes back through
// the inverse conversion, so it arrives in the source's dtype and on the source's device (an f32
// weight cast to f16 under autocast receives an f32 gradient).
#include "autograd/node.h"
#include "core/copy.h"

namespace hg {

Tensor Tensor::to(DType dtype) const { return to(dtype, Float8Overflow::Default); }

Tensor Tensor::to(DType dtype, Float8Overflow overflow) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = empty(shape(), {.dtype = dtype, .device = device()});
  detail::copy_into(out, *this, overflow);
  // NOTE: no node for an FP8 result: its gradient would be an FP8 tensor, which no op computes
  // on. The FP8 recipes quantise inside their ops and keep gradients in f32 / 16-bit.
  if (is_floating(dtype) && !is_float8(dtype)) {
    autograd::record("to", out, {*this}, [source = this->dtype()](const Tensor& g) -> std::vector<Tensor> {
      return {g.to(source)};
    });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device});
  detail::copy_into(out, *this);
  autograd::record("to_device", out, {*this}, [source = this->device()](const Tensor& g) -> std::vector<Tensor> {
    return {g.to(source)};
  });
  return out;
}

}  // namespace hg
