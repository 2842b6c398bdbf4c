// The backward of relu and relu6 (= hardtanh(0, 6)) on f16 and bf16 tensors as a selection of
// bits, without widening a value.
//
// For floats of sign 0 the 16 bits, read as an integer, are in the order of the values, and every
// NaN's bits lie above +inf's. With s the bits of x as a signed 16-bit integer (negative values,
// -0 included, have s < 0), the gradient is
//
//   g    where 0 < s < max's bits (relu: up to +inf's, included)
//   +0   otherwise (NaN included)
//
// the values math::Relu and math::Hardtanh{0, 6} give through f32 (kernels/math/activation.h:
// x > 0 && x < max ? g : 0), from the op's input or its output alike (both are inside (0, max) at
// the same places). Through f32, map_elementwise widens each chunk of x and g and rounds the
// result back: 128 x 16 x 28 x 28 bf16, 1 thread, 0.43-0.48 -> 0.35 ms. (The forward, a clamp,
// measured slower this way than widened: it stays on map_elementwise.)
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// True for the tensors these kernels take: CPU, f16 or bf16.
bool relu_bits_apply(const Tensor& x);

// grad where 0 < x < max (+inf included where max is +inf: relu; 6: relu6), else 0: the gradient
// of the op at x, its input or its output; grad of x's shape (converted to x's dtype if it is
// not).
Tensor relu_backward_bits(const Tensor& x, const Tensor& grad, double max);

}  // namespace hg::kernels
