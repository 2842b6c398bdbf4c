// The CPU GEMM every matmul-like op goes through: C (M,N) = A (M,K) @ B (K,N), or C += A @ B.
// A and B are any strided 2-D views whose rows or columns are contiguous (a transposed view is
// free); C is contiguous row-major. f32/f64 call Eigen directly; f16/bf16 operands are widened to
// f32 panels with the SIMD converters, multiplied in f32 and rounded once.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::detail {

struct MatrixView {
  const void* data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  // in elements
};

// A 2-D view of `t` (any dtype); throws if neither its rows nor its columns are contiguous.
MatrixView matrix_view(const Tensor& t);
MatrixView matrix_view(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// c = a @ b (accumulate = false) or c += a @ b, all of dtype `dtype`; c is contiguous (M, N).
void gemm(DType dtype, const MatrixView& a, const MatrixView& b, void* c, bool accumulate);

// The same on dense compute-type panels (S = float or double), used by conv2d.
template <class S>
void gemm_dense(const MatrixView& a, const MatrixView& b, S* c, bool accumulate);

// True when C^T = B^T A^T, an N x M product, fills the CPU GEMM's register tiles with fewer
// padding lanes than C = A B (M x N). Callers free to choose the layout of a result use it.
bool prefer_transposed_product(int64_t M, int64_t N);

// True when a 2-D view with these strides can be multiplied without copying.
bool gemm_ready(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

}  // namespace hg::detail
