// embedding(indices i64 (any shape), weight (num, dim)) -> (indices..., dim): rows of weight.
// An index outside [0, num) is an hg::Error. The backward adds gradients into the used rows.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor embedding(const Tensor& indices, const Tensor& weight);

}  // namespace hg
