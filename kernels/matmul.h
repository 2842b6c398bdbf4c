// The GEMM kernels of matmul and linear, on the operands' device (halfgrad's packed CPU GEMM or
// cuBLASLt). They record nothing; ops/linalg.cpp puts checks, autocast and the nodes around them.
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// Whether `t` can be a GEMM operand as it is: its rows or its columns are contiguous. (An op makes
// a contiguous copy of one that cannot -- with autograd's contiguous(), as the copy is part of
// the graph.)
bool gemm_ready(const Tensor& t);

// out[b] = a[b] @ b[b] for every batch b (a size-1 or missing batch dim broadcasts); a and b are
// GEMM operands of out's dtype, out is contiguous and is overwritten.
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out);

// linear's forward on a 2-D input: x2 (rows, in) @ w^T (+ b), then relu(...) or gelu(...) if
// asked (kernels/math's Relu, NaN kept, and Gelu, the erf form): a fresh (rows, out_features)
// tensor. With gelu, `pre_gelu` (if given) receives x2 @ w^T + b itself, which GELU's derivative
// needs; on the CPU the GEMM writes both as it finishes each block.
Tensor linear(const Tensor& x2, const Tensor& w, const Tensor& b, bool relu, bool gelu = false,
              Tensor* pre_gelu = nullptr);

// linear's parameter gradients from g2 (rows, out_features) and the saved input x2 (rows, in):
// weight = g2^T @ x2 and, with need_bias, bias = the column sums of g2 (on a GPU one cuBLASLt
// call writes both, the bias through its BGRADB epilogue).
struct LinearWeightGrads {
  Tensor weight, bias;
};
LinearWeightGrads linear_weight_grads(const Tensor& g2, const Tensor& x2, bool need_bias);

}  // namespace hg::kernels
