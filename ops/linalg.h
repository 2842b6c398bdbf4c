// matmul and linear. CPU: Eigen GEMM for f32/f64 (OpenMP threads); f16/bf16 operands are widened
// to f32 panels, multiplied in f32 and rounded once (never Eigen::half arithmetic, which is
// emulated and ~300x slower).
//
//   matmul(a, b): (M,K)@(K,N) -> (M,N); (B,M,K)@(B,K,N) -> (B,M,N); a 2-D operand is broadcast
//                 over the batch of a 3-D one.
//   linear(x, w, b): x (..., in) @ w(out, in)^T + b(out)  -> (..., out)
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// relu(linear(...)) as one op (on CUDA: cuBLASLt's bias+ReLU epilogue). nn::Sequential uses it
// for a Linear followed by ReLU.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace hg
