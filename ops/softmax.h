// softmax and log_softmax along one dimension, max-subtracted so that logits of +-1e4 (f32) or
// +-6e4 (f16) stay finite; 16-bit inputs are computed in f32.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);

}  // namespace hg
