// Activations: relu, leaky_relu, gelu (exact, erf-based: PyTorch's default), silu, sigmoid, tanh,
// softplus.
// Differentiable; 16-bit inputs are computed in f32 and rounded once.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor relu(const Tensor& x);
// x where x > 0, else negative_slope * x (PyTorch's torch.nn.functional.leaky_relu).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// log(1 + exp(beta x)) / beta, x itself where beta x > threshold (torch.nn.functional.softplus).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor tanh(const Tensor& x);

}  // namespace hg
