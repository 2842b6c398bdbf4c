// matmul and linear. CPU: Eigen GEMM for f32/f64 (OpenMP threads); f16/bf16 operands are widened
// to f32 panels, multiplied in f32 and rounded once (never Eigen::half arithmetic, which is
// emulated and ~300x slower).
//
//   matmul(a, b): (M,K)@(K,N) -> (M,N); (B,M,K)@(B,K,N) -> (B,M,N); a 2-D operand is broadcast
//                 over the batch of a 3-D one.
//   linear(x, w, b): x (..., in) @ w(out, in)^T + b(out)  -> (..., out)
//   linear(x, w, b, {.epilogue = Epilogue::Relu}): relu of that, in the same op (ops/epilogue.h)
#pragma once
#include "core/tensor.h"
#include "ops/epilogue.h"

namespace hg {

Tensor matmul(const Tensor& a, const Tensor& b);

struct LinearOptions {
  Epilogue epilogue = Epilogue::None;
};

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, LinearOptions options = {});

}  // namespace hg
