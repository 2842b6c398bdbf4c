// What one CPU level contributes to the packed GEMM (kernels/cpu/gemm.cpp drives it, BLIS's
// loop structure):
//
//   for each nc-wide column block of B, kc-deep slice of K:   pack B -> nr-wide panels
//     for each mc-tall row block of A:                          pack A -> mr-tall panels
//       for each mr x nr tile: the microkernel keeps the tile in registers and runs one FMA
//       per (row, vector of columns, k), reading A and B panels contiguously.
//
// (A level may read an f32 A with contiguous rows in place instead of packing it: tile_direct.)
//
// Packers read any strides (rows or columns contiguous) and write f32 panels: panel p of A holds,
// for each k, rows p*mr .. p*mr+mr-1; panel q of B holds, for each k, columns q*nr .. q*nr+nr-1.
// Lanes past the matrix edge are zeros. With native bf16 products the panels hold bf16 instead,
// in the layout of the level's bf16 microkernel (Bf16Microkernel): AVX512-BF16 packs k-pairs, A
// as [k/2][mr][2] and B as [k/2][nr][2]; AMX packs A as 32-deep rows [k/32][mr][32] and B as
// k-pairs, each padded with zeros to its k granule.
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

// The bf16 half of a level (PackedGemmKernel::bf16): its own packers and microkernel, with the
// f32 half's nr and cache blocks (its mr may differ, dividing mc).
struct Bf16Microkernel {
  int64_t mr;
  // A slice of depth kc is packed as round_up(kc, k_granule) / 2 k-pairs, the padding zeros: 2 for
  // vdpbf16ps (one pair), 32 for AMX (one tile row holds 32 k).
  int64_t k_granule;
  void (*pack_a)(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint16_t* out);
  void (*pack_b)(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, uint16_t* out);
  // C[0:rows, 0:cols] = (or +=) A_panel @ B_panel over `pairs` (padded) k-pairs, as `store` says.
  void (*tile)(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
               const TileStore& store);
  // Around one thread's run of tiles, or null: AMX loads its tile configuration and releases
  // the tile state after (the tile registers are per-thread state that the OS saves).
  void (*begin)();
  void (*end)();
};

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

  // Native bf16 products (null where the level has none).
  const Bf16Microkernel* bf16;

  // Optional (null: none): the last A panel of a block when it has at most short_rows rows,
  // against two full B panels at once (b0, b1): C[0:rows, 0:2*nr]. Batch 128 on AVX2 is 21 tiles
  // of 6 rows and one of 2, whose full-size tile would spend two thirds of its FMAs on padding.
  int64_t short_rows;
  void (*tile_short)(int64_t kc, const float* a, const float* b0, const float* b1, float* c, int64_t ldc,
                     int64_t rows, const TileStore& store);

  // Optional (null: none): `tile` reading a row-major f32 A where it is (row i at a + i * lda),
  // with no packed panel. Packing such an A is a transpose (k-major panels), and where the
  // product is narrow -- an A panel serving a few B panels: attention's 64-wide blocks, a linear
  // layer's input gradient with 128 inputs -- it was up to 15% of the product's time. The tile
  // broadcasts each A value from its row instead, as many loads as from a panel.
  void (*tile_direct)(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t rows,
                      int64_t cols, const TileStore& store) = nullptr;
};

// One per x86 level, each defined in the file compiled for it (gemm_avx2.cpp, gemm_avx512.cpp).
const PackedGemmKernel& packed_gemm_avx2();
const PackedGemmKernel& packed_gemm_avx512();
const PackedGemmKernel& packed_gemm_avx512bf16();
const PackedGemmKernel& packed_gemm_amx();  // gemm_amx.cpp: avx512bf16's f32 half, AMX bf16 tiles

// AVX512-BF16's k-pair packer (gemm_avx512.cpp), which AMX shares for B: a block of a bf16 matrix,
// `lanes` x `kc` from (lane0, k0), lane and k advancing by lane_stride and k_stride, into panels
// of `width` lanes, [padded_pairs][width][2] each (padded_pairs >= (kc + 1) / 2, zeros after).
// k_offsets (only with lane_stride 1: B's rows): k-row k starts at base + k_offsets[k] instead of
// base + k * k_stride (MatrixView::row_offsets).
void pack_bf16_pairs(const uint16_t* base, int64_t lane_stride, int64_t k_stride, int64_t lane0, int64_t lanes,
                     int64_t k0, int64_t kc, int64_t width, int64_t padded_pairs, uint16_t* out,
                     const int64_t* k_offsets = nullptr);
// Transposes up to 16 x 16 32-bit words with AVX-512 (gemm_avx512.cpp): `lanes` source rows (row r
// at src + r * src_stride, `depth` contiguous words) become `depth` rows at dst + k * dst_stride.
void transpose_words(const float* src, int64_t src_stride, int64_t lanes, int64_t depth, float* dst,
                     int64_t dst_stride);

}  // namespace hg::kernels::cpu
