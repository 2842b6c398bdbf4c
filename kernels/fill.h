// fill: every element of a tensor set to one value (converted to its dtype with
// detail::convert_value's rules), on the tensor's device. Records nothing; Tensor::fill_ and
// zero_ (ops/inplace.cpp) put the in-place checks around it.
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

void fill(const Tensor& t, double value);

}  // namespace hg::kernels
