// matmul and linear. CPU: halfgrad's packed GEMM (kernels/cpu/gemm.h) with the microkernel of the
// CPU level in use (AVX2+FMA, AVX-512, AVX512-BF16), Eigen at the generic level, on aarch64 and
// for f64; the rows of C split over hg's thread pool. f16/bf16 operands are multiplied in f32 (or
// natively as bf16 pairs with AVX512-BF16) and rounded once -- never Eigen::half arithmetic, which
// is emulated and ~300x slower. CUDA: cuBLASLt (tensor cores for 16-bit).
//
//   matmul(a, b): (M,K)@(K,N) -> (M,N); (...,M,K)@(...,K,N) -> (...,M,N) with the batch dims
//                 broadcast as PyTorch's ([B,H,T,D] @ [B,H,D,T], [B,1,M,K] @ [H,K,N], a 2-D
//                 operand against any batch); a 1-D operand is a row (left) or a column (right)
//                 whose dim leaves the result ([K] @ [K] is a 0-d dot product).
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
