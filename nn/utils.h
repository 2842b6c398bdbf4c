// Gradient utilities.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hg::nn::utils {

// Scales the gradients of `parameters` in place so that their joint 2-norm is at most max_norm;
// returns the norm before clipping (computed in f64). Call it after GradScaler::unscale_.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm);

}  // namespace hg::nn::utils
