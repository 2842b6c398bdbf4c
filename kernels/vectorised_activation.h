// Activations (and log) on the CPU over the vectorised transcendental functions of
// kernels/cpu/vector_math.h, instead of a libm call per element (GELU's loops and erff were ~20%
// of a character-level GPT's step): GELU (the exact, erf form) and SiLU forward and backward, sigmoid and
// tanh forward (their backward reads the saved output: no transcendental), softplus, log. f32 directly; f16 and
// bf16 widened to f32 a chunk at a time and rounded once. The formulas are
// kernels/math/activation.h's (the CUDA kernels' and f64's), within 2 ulp.
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// True for the tensors these kernels take: CPU, f32 / f16 / bf16.
bool activation_vectorised(const Tensor& x);
Tensor gelu_forward_cpu(const Tensor& x);
// grad * gelu'(x), in x's dtype; grad has x's shape.
Tensor gelu_backward_cpu(const Tensor& x, const Tensor& grad);
Tensor silu_forward_cpu(const Tensor& x);
Tensor silu_backward_cpu(const Tensor& x, const Tensor& grad);
Tensor sigmoid_forward_cpu(const Tensor& x);
// softplus with PyTorch's default beta 1 and threshold 20 (other parameters: the functor).
Tensor softplus_forward_cpu(const Tensor& x);
Tensor softplus_backward_cpu(const Tensor& x, const Tensor& grad);
Tensor log_forward_cpu(const Tensor& x);  // the log op's forward (its backward is g / x)
Tensor tanh_forward_cpu(const Tensor& x);

}  // namespace hg::kernels
