// GELU (the exact, erf form) on the CPU over the vectorised erf and exp of
// kernels/cpu/vector_math.h, instead of a libm erff call per element (the GELU loops and erff
// were ~20% of a character-level GPT's step). f32 directly; f16 and bf16 widened to f32 a chunk
// at a time and rounded once. The formulas are kernels/math/activation.h's Gelu (the CUDA
// kernel's and f64's).
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// True for the tensors these kernels take: CPU, f32 / f16 / bf16.
bool gelu_vectorised(const Tensor& x);
Tensor gelu_forward_cpu(const Tensor& x);
// grad * gelu'(x), in x's dtype; grad has x's shape.
Tensor gelu_backward_cpu(const Tensor& x, const Tensor& grad);

}  // namespace hg::kernels
