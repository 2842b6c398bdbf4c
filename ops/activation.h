// Activations: relu, leaky_relu, gelu (exact, erf-based: PyTorch's default; or its tanh
// approximation), silu, sigmoid, tanh, softplus, and the piecewise and exponential ones vision
// models use (relu6, hardtanh, hardsigmoid, hardswish, elu, selu, celu, mish, softsign, logsigmoid),
// each as torch.nn.functional defines it.
// Differentiable; 16-bit inputs are computed in f32 and rounded once.
#pragma once
#include <string>

#include "core/tensor.h"

namespace hg {

Tensor relu(const Tensor& x);
// x where x > 0, else negative_slope * x (PyTorch's torch.nn.functional.leaky_relu).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x);
struct GeluOptions {
  std::string approximate = "none";  // "none" (x * Phi(x), erf) or "tanh"
};
Tensor gelu(const Tensor& x, GeluOptions options);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// log(1 + exp(beta x)) / beta, x itself where beta x > threshold (torch.nn.functional.softplus).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor tanh(const Tensor& x);

Tensor relu6(const Tensor& x);                                                   // min(max(x, 0), 6)
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);  // min(max(x, min), max)
Tensor hardsigmoid(const Tensor& x);                                             // relu6(x + 3) / 6
Tensor hardswish(const Tensor& x);                                               // x * relu6(x + 3) / 6
Tensor elu(const Tensor& x, double alpha = 1.0);   // x > 0 ? x : alpha * (exp(x) - 1)
Tensor selu(const Tensor& x);                      // 1.0507 * elu(x, 1.6733)
Tensor celu(const Tensor& x, double alpha = 1.0);  // x > 0 ? x : alpha * (exp(x / alpha) - 1)
Tensor mish(const Tensor& x);                      // x * tanh(softplus(x))
Tensor softsign(const Tensor& x);                  // x / (1 + |x|)
Tensor logsigmoid(const Tensor& x);                // log(sigmoid(x)), without overflow
// x > 0 ? x : weight * x, with one learned slope (weight of 1 element) or one per channel (dim 1
// of x; weight of C elements).
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace hg
