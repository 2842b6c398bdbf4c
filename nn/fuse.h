// nn::fuse: asks a Sequential to run each Linear->ReLU, Linear->GELU (the exact form),
// Conv2d->ReLU, and BatchNorm2d/BatchNorm1d->ReLU or ->ReLU6 pair as one op, the activation being
// the layer's epilogue (ops/epilogue.h): one pass less over the activations.
//
//   hg::nn::Sequential model{hg::nn::Linear(784, 256), hg::nn::ReLU(), hg::nn::Linear(256, 10)};
//   hg::nn::Sequential fast = hg::nn::fuse(model);   // the same layers and parameters
//   fast(x);   // linear(x, w0, b0, {.epilogue = Relu}), then linear(.., w2, b2)
//
// Nothing else changes: the fused op is still `linear` / `conv2d` / `batch_norm` for the cast policy
// (set_policy("linear", ...) reaches it), the PrecisionReport and ShadowCheck, and its results
// and gradients equal the unfused pair's, NaN included. Only modules of exactly these types fuse
// (a class derived from Linear may do something else in its forward); nested Sequentials are
// left as they are.
#pragma once
#include <optional>

#include "nn/sequential.h"

namespace hg::nn {

// A Sequential sharing `model`'s layers (copies of modules share their state) that fuses.
Sequential fuse(Sequential model);

namespace detail {
// `layer` then `next` on x as one op, or nullopt when the pair does not fuse.
std::optional<Tensor> forward_fused(Module& layer, Module& next, const Tensor& x);
}  // namespace detail

}  // namespace hg::nn
