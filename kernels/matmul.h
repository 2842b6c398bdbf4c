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

// linear's forward on a 2-D input: x2 (rows, in) @ w^T (+ b), then relu(...) if asked (NaN
// kept, as kernels/math's Relu): a fresh (rows, out_features) tensor.
Tensor linear(const Tensor& x2, const Tensor& w, const Tensor& b, bool relu);

// linear's parameter gradients from g2 (rows, out_features) and the saved input x2 (rows, in):
// weight = g2^T @ x2 and, with need_bias, bias = the column sums of g2 (on a GPU one cuBLASLt
// call writes both, the bias through its BGRADB epilogue).
struct LinearWeightGrads {
  Tensor weight, bias;
};
LinearWeightGrads linear_weight_grads(const Tensor& g2, const Tensor& x2, bool need_bias);

}  // namespace hg::kernels
