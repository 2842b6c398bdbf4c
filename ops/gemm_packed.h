// A packed GEMM for CPUs with AVX-512 (BLIS's loop structure): C (M,N) [+]= A (M,K) @ B (K,N).
//
//   for each NC-wide column block of B, KC-deep slice of K:   pack B -> NR-wide panels
//     for each MC-tall row block of A (in parallel):           pack A -> MR-tall panels
//       for each MR x NR tile: the microkernel keeps the tile in 24 zmm registers and runs
//       one FMA per (row, 16 columns, k), reading A and B panels contiguously.
//
// Packing reads any strides and any element type T (f32, f16, bf16) and writes f32, so 16-bit
// operands are widened as they are packed, with no full-size f32 copy.
#pragma once
#include <cstdint>

namespace hg::detail {

struct MatrixView;

bool packed_gemm_available();  // the CPU has AVX-512F

// c is dense row-major f32 with leading dimension ldc; a and b are views of element type T.
template <class T>
void packed_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, bool accumulate);

}  // namespace hg::detail
