// What one CPU level contributes to the packed GEMM (kernels/cpu/gemm.cpp drives it, BLIS's
// loop structure):
//
//   for each nc-wide column block of B, kc-deep slice of K:   pack B -> nr-wide panels
//     for each mc-tall row block of A:                          pack A -> mr-tall panels
//       for each mr x nr tile: the microkernel keeps the tile in registers and runs one FMA
//       per (row, vector of columns, k), reading A and B panels contiguously.
//
// Packers read any strides (rows or columns contiguous) and write f32 panels: panel p of A holds,
// for each k, rows p*mr .. p*mr+mr-1; panel q of B holds, for each k, columns q*nr .. q*nr+nr-1.
// Lanes past the matrix edge are zeros. With native bf16 products (AVX512-BF16) panels hold bf16
// k-pairs instead: A as [k/2][mr][2], B as [k/2][nr][2], an odd k padded with a zero.
#pragma once
#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace hg::kernels::cpu {

// How one tile's sums meet C, for one K slice: C = relu([C +] [bias +] sums). The driver asks
// for the bias on the first slice only and for relu on the last (gemm.h's GemmEpilogue).
struct TileStore {
  bool add_to_c;      // false: the first slice of an overwriting product
  const float* bias;  // the bias of the tile's first column, or null
  bool relu;          // NaN-keeping: max(0, x) with x as the operand that wins ties and NaN
};

// The same for one value (the scalar edge paths): sums + [C +] [bias[column]], then relu.
inline float stored_value(float sums, float c, int64_t column, const TileStore& store) {
  if (store.add_to_c) sums += store.bias ? c + store.bias[column] : c;
  else if (store.bias) sums += store.bias[column];
  return store.relu && sums < 0.0f ? 0.0f : sums;  // Relu::fwd: NaN and -0 pass
}

struct PackedGemmKernel {
  const char* name;
  int64_t mr, nr;      // register tile
  int64_t kc, mc, nc;  // cache blocks: an A panel (mr x kc) and a B panel stay in L1, A's block in L2

  // Extra floats the scratch buffers need past a packed block (packers may store whole vectors).
  int64_t slack;
  void (*pack_a)(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out);
  void (*pack_b)(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out);
  // C[0:rows, 0:cols] = (or +=) A_panel @ B_panel over kc, as `store` says; rows <= mr, cols <= nr.
  void (*tile)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
               const TileStore& store);

  // Native bf16 (null where the level has none): the same, on bf16 k-pairs.
  void (*pack_a_bf16)(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint16_t* out);
  void (*pack_b_bf16)(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, uint16_t* out);
  void (*tile_bf16)(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int64_t rows,
                    int64_t cols, const TileStore& store);

  // Optional (null: none): the last A panel of a block when it has at most short_rows rows,
  // against two full B panels at once (b0, b1): C[0:rows, 0:2*nr]. Batch 128 on AVX2 is 21 tiles
  // of 6 rows and one of 2, whose full-size tile would spend two thirds of its FMAs on padding.
  int64_t short_rows;
  void (*tile_short)(int64_t kc, const float* a, const float* b0, const float* b1, float* c, int64_t ldc,
                     int64_t rows, const TileStore& store);
};

// One per x86 level, each defined in the file compiled for it (gemm_avx2.cpp, gemm_avx512.cpp).
const PackedGemmKernel& packed_gemm_avx2();
const PackedGemmKernel& packed_gemm_avx512();
const PackedGemmKernel& packed_gemm_avx512bf16();

}  // namespace hg::kernels::cpu
