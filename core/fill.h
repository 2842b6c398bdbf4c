// fill: every element of a tensor set to one value (converted to its dtype with convert_value's
// rules), on the tensor's device. Records nothing. Behind full/zeros/ones (core/tensor.cpp) and
// Tensor::fill_ / zero_ (ops/inplace.cpp, which add the in-place checks).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::detail {

void fill(const Tensor& t, double value);
// The GPU side: every element set to `bits` (the value's bytes in t's dtype), core/cuda/fill.cu.
// A CPU-only build throws "built without CUDA".
void cuda_fill(const Tensor& t, uint64_t bits);

}  // namespace hg::detail
