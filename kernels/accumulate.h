// The arithmetic the autograd engine does on gradients (kernels: no node recorded, no autocast,
// any device): converting a gradient to its input's dtype, owning a copy, and adding the
// gradients that meet at one tensor.
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// t's values in `dtype`, a new contiguous tensor on t's device.
Tensor converted(const Tensor& t, DType dtype);
// A contiguous copy of t that shares no memory with it.
Tensor copied(const Tensor& t);
// a + b in their promoted dtype, broadcast, in a new tensor (the engine's sum of two gradients).
Tensor added(const Tensor& a, const Tensor& b);
// dst += src in place (src broadcast to dst's shape and converted to dst's dtype); bumps dst's
// version, as every in-place write does.
void add_into(const Tensor& dst, const Tensor& src);

}  // namespace hg::kernels
