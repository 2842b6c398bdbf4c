// A packed GEMM for CPUs with AVX-512 (BLIS's loop structure): C (M,N) [+]= A (M,K) @ B (K,N).
//
//   for each NC-wide column block of B, KC-deep slice of K:   pack B -> NR-wide panels
//     for each MC-tall row block of A (in parallel):           pack A -> MR-tall panels
//       for each MR x NR tile: the microkernel keeps the tile in 24 zmm registers and runs
//       one FMA per (row, 16 columns, k), reading A and B panels contiguously.
//
// Packing reads any strides and writes f32 panels. 16-bit operands (T = f16, or bf16 without
// AVX512-BF16) are widened block by block with the SIMD converters just before packing, never as
// a full-size f32 copy; with AVX512-BF16, bf16 panels stay bf16 for the vdpbf16ps microkernel.
#pragma once
#include <cstdint>

namespace hg::detail {

struct MatrixView;

bool packed_gemm_available();  // the CPU has AVX-512F

// c is dense row-major f32 with leading dimension ldc; a and b are views of element type T.
template <class T>
void packed_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, bool accumulate);

}  // namespace hg::detail
