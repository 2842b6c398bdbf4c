// The CPU GEMM every matmul-like op goes through: C (M,N) = A (M,K) @ B (K,N), or C += A @ B.
// A and B are any strided 2-D views whose rows or columns are contiguous (a transposed view is
// free); C is contiguous row-major. f32 and 16-bit operands run on halfgrad's packed GEMM with
// the microkernel of the CPU level in use (gemm_microkernel.h: AVX2+FMA, AVX-512, AVX512-BF16),
// or on Eigen where no packed kernel exists (generic level, aarch64) and for f64. 16-bit
// operands are multiplied in f32 (or natively as bf16 pairs on AVX512-BF16) and rounded once.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace hg::kernels::cpu {

struct MatrixView {
  const void* data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  // in elements
  // When set, row r starts at data + row_offsets[r] elements instead of r * row_stride: rows at
  // irregular distances, such as the taps of a convolution read straight from a padded image
  // (kernels/conv.cpp's wide columns; as A, the taps of the wide-columns weight gradient).
  // Accepted only by packed_gemm<bfloat16>, with col_stride 1, on a CPU level with native bf16
  // products (has_native_bf16_gemm()).
  const int64_t* row_offsets = nullptr;
};

// A 2-D view of `t` (any dtype); throws if neither its rows nor its columns are contiguous.
MatrixView matrix_view(const Tensor& t);
MatrixView matrix_view(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// A finished block of the f32 result C: rows [row, row + rows) x columns [col, col + cols), at
// `block` with leading dimension ldc (C's own memory).
using BlockFinisher =
    std::function<void(float* block, int64_t ldc, int64_t row, int64_t rows, int64_t col, int64_t cols)>;

// What the GEMM applies to C as it stores it: linear's bias (one value per column of C, of C's
// dtype) and then relu, NaN kept (kernels/math's Relu). The packed kernels apply both to the
// tile in registers, which saves a pass over C for each (linear's forward did two).
struct GemmEpilogue {
  const void* column_bias = nullptr;
  bool relu = false;
  // gemm() only: GELU (the erf form, kernels/math's Gelu) after the bias, and where GELU's
  // derivative will need it, bias + a @ b itself in pre_gelu (C's dtype, contiguous (M, N)).
  bool gelu = false;
  void* pre_gelu = nullptr;
  // packed_gemm only: called on each block of C as soon as its last slice is stored, while the
  // block is still in cache -- how gemm() applies GELU and rounds 16-bit results without another
  // pass over C. Blocks of different tasks may run at once.
  BlockFinisher finish_block = {};
  // packed_gemm without a C only (a finish_block's scratch blocks): called on each block before
  // its first slice, with the same arguments; the tiles then add their sums to what it wrote.
  // How a convolution starts its rows from their channel's bias, which the tiles' column bias
  // cannot express.
  BlockFinisher start_block = {};
};

// c = a @ b (accumulate = false) or c += a @ b, all of dtype `dtype`; c is contiguous (M, N).
// With an epilogue: c = relu([c +] column_bias + a @ b), or c = gelu(...) with pre_gelu = (...).
void gemm(DType dtype, const MatrixView& a, const MatrixView& b, void* c, bool accumulate,
          const GemmEpilogue& epilogue = {});

// The same on dense compute-type panels (S = float or double), used by conv2d; the optional bias
// and relu are gemm's epilogue, in S.
template <class S>
void gemm_dense(const MatrixView& a, const MatrixView& b, S* c, bool accumulate, const S* bias = nullptr,
                bool relu = false);

// C (f32, leading dimension ldc) [+]= A @ B with A and B of element type T (float, half,
// bfloat16) on the packed kernel; bf16 uses native bf16 products where the CPU has them.
// The epilogue's bias, if any, is f32 here. Only valid when has_packed_gemm().
template <class T>
void packed_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, bool accumulate,
                 const GemmEpilogue& epilogue = {});
bool has_packed_gemm();
// True when packed_gemm<bfloat16> multiplies bf16 pairs natively (AVX512-BF16, AMX): the only
// kernels that read a MatrixView's row_offsets.
bool has_native_bf16_gemm();

// A right operand B (K x N, element type T) packed once for many products: what packed_gemm
// packs on every call, kept. For a B used again and again with small left operands -- an RNN's
// recurrent weight, multiplied by a [batch, H] state at every time step -- packing B costs about
// as much as the product. Only valid when has_packed_gemm(); the layout is the CPU level's.
struct PackedRhs {
  DType dtype = f32;  // T's dtype
  int64_t K = 0, N = 0;
  int64_t slice_depth = 0;  // K is packed in slices of this depth (the last may be thinner)
  size_t slice_floats = 0;  // 4-byte units between two slices' panels (a multiple of 64 bytes)
  std::vector<float> storage;
  size_t offset = 0;        // where the 64-byte aligned panels start in storage
  const float* slice(int64_t k0) const { return storage.data() + offset + size_t(k0 / slice_depth) * slice_floats; }
};
template <class T>
PackedRhs pack_rhs(const MatrixView& b);
// C (f32, leading dimension ldc) [+]= A @ B with B packed by pack_rhs<T>: the same results, bit
// for bit, as packed_gemm<T> with B itself.
template <class T>
void packed_gemm(const MatrixView& a, const PackedRhs& b, float* c, int64_t ldc, bool accumulate,
                 const GemmEpilogue& epilogue = {});

// True when C^T = B^T A^T, an N x M product, fills the CPU GEMM's register tiles with fewer
// padding lanes than C = A B (M x N). Callers free to choose the layout of a result use it.
bool prefer_transposed_product(int64_t M, int64_t N);

// True when a 2-D view with these strides can be multiplied without copying.
bool gemm_ready(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

}  // namespace hg::kernels::cpu
