// embedding(indices i64 or i32 (any shape), weight (num, dim)) -> (indices..., dim): rows of
// weight. An index outside [0, num) is an hg::Error: thrown by the call on the CPU; on a GPU the
// kernel finds it and the next synchronisation throws it (the call never waits for the GPU).
// The backward adds gradients into the used rows.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor embedding(const Tensor& indices, const Tensor& weight);

}  // namespace hg
