// The AVX2 + FMA packed-GEMM kernels (see gemm_microkernel.h), for the x86 CPUs without AVX-512
// (most laptops and desktops: AMD before Zen 4, Intel consumer chips since Alder Lake).
// AVX2 has 16 ymm registers of 8 floats, so the tile is 6 x 16: 12 accumulators, two B vectors
// and one broadcast of A, with two FMAs per cycle the bound (BLIS's Haswell/Zen shape).
#include "core/simd_target.h"
#if HG_X86

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_lanes.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_pack.h"

namespace hg::kernels::cpu {

namespace {

constexpr int64_t kMR = 6;     // tile rows
constexpr int64_t kNR = 16;    // tile columns: two ymm of 8 floats
constexpr int64_t kKC = 256;   // depth of one slice: A panel (6 KB) + B panel (16 KB) stay in L1
constexpr int64_t kMC = 144;   // rows per A block (24 panels, 144 KB): the block stays in L2
constexpr int64_t kNC = 1024;  // columns per B block (1 MB): streamed from L3
// The A packer stores whole ymm rows of 8 floats into 6-float panel rows: the last one spills
// two floats past the block.
constexpr int64_t kSlack = 8;

}  // namespace

HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace {

using avx2::first_lanes;

// ---- packing ------------------------------------------------------------------------------------

// In-register transpose of an 8 x 8 block: r[i] holds row i; afterwards r[j] holds column j.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// Transposes up to 8 x 8 floats (the packers' block transpose, kernels/cpu/gemm_pack.h): `lanes`
// source rows of `depth` contiguous values become `depth` rows of 8 values at dst, zeros past
// `lanes`. NOTE: it stores whole ymm rows: a 6-float A panel row takes 2 floats of the next row
// (overwritten when that row is written; the last row's spill lands in kSlack), and B panels are
// 16 wide, so their 8-lane halves fit.
void transpose_block(const float* src, int64_t src_stride, int64_t lanes, int64_t depth, float* dst, int64_t dst_stride) {
  const __m256i mask = first_lanes(depth);
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = i >= lanes ? _mm256_setzero_ps()
           : depth == 8 ? _mm256_loadu_ps(src + i * src_stride)
                        : _mm256_maskload_ps(src + i * src_stride, mask);
  transpose8(r);
  for (int64_t d = 0; d < depth; ++d) _mm256_storeu_ps(dst + d * dst_stride, r[d]);
}

void pack_a(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  pack_a_panels<kMR, 8>(a, i0, mc, k0, kc, out, transpose_block);
}

void pack_b(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  pack_b_panels<kNR, 8>(b, k0, kc, j0, nc, out, transpose_block);
}

// ---- the microkernel ----------------------------------------------------------------------------

// What a row of sums becomes in C (TileStore): sums + [C +] [bias], then relu. max(0, x) keeps a
// NaN x and a -0 x: vmaxps returns its second operand on NaN and on equal zeros, as Relu::fwd.
inline __m256 stored(__m256 sums, const float* c, __m256 bias, const TileStore& store) {
  if (store.add_to_c) {
    const __m256 old = _mm256_loadu_ps(c);
    sums = _mm256_add_ps(sums, store.bias ? _mm256_add_ps(old, bias) : old);
  } else if (store.bias) {
    sums = _mm256_add_ps(sums, bias);
  }
  return store.relu ? _mm256_max_ps(_mm256_setzero_ps(), sums) : sums;
}

// One tile: C[0:rows, 0:cols] = (or +=) A_panel @ B_panel over kc. A full tile is stored
// straight from the registers; an edge tile goes through a small buffer.
void tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
          const TileStore& store) {
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    // C is the one operand not packed (out of L2 from 1024^2 on): ask for the tile's rows now,
    // so they have arrived when the tile is stored after the k loop.
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNR - 1), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * kNR), b1 = _mm256_load_ps(b + k * kNR + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + k * kMR + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  if (rows == kMR && cols == kNR) {
    const __m256 bias0 = store.bias ? _mm256_loadu_ps(store.bias) : _mm256_setzero_ps();
    const __m256 bias1 = store.bias ? _mm256_loadu_ps(store.bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      float* row = c + i * ldc;
      _mm256_storeu_ps(row, stored(acc[i][0], row, bias0, store));
      _mm256_storeu_ps(row + 8, stored(acc[i][1], row + 8, bias1, store));
    }
    return;
  }
  alignas(32) float buffer[kMR][kNR];
  // NOTE: every loop over acc is fully unrolled (constant indices), or the compiler keeps the
  // accumulators in memory and the microkernel runs at half speed.
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) _mm256_store_ps(buffer[i], acc[i][0]), _mm256_store_ps(buffer[i] + 8, acc[i][1]);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = stored_value(buffer[i][j], c[i * ldc + j], j, store);
}

// The short last A panel (its first 1 or 2 rows real) against two B panels: 2 x 32, 8
// accumulators, as many FMAs in flight as the FMA units' latency needs.
void tile_short(int64_t kc, const float* a, const float* b0, const float* b1, float* c, int64_t ldc, int64_t rows,
                const TileStore& store) {
  constexpr int kRows = 2, kVectors = 4;
  __m256 acc[kRows][kVectors];
#pragma GCC unroll 2
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b[kVectors] = {_mm256_load_ps(b0 + k * kNR), _mm256_load_ps(b0 + k * kNR + 8),
                                _mm256_load_ps(b1 + k * kNR), _mm256_load_ps(b1 + k * kNR + 8)};
#pragma GCC unroll 2
    for (int i = 0; i < kRows; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + k * kMR + i);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm256_fmadd_ps(ai, b[v], acc[i][v]);
    }
  }
  __m256 bias[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) bias[v] = store.bias ? _mm256_loadu_ps(store.bias + 8 * v) : _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int i = 0; i < kRows; ++i) {
    if (i >= rows) break;
    float* row = c + i * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(row + 8 * v, stored(acc[i][v], row + 8 * v, bias[v], store));
  }
}

}  // namespace
HG_TARGET_END

const PackedGemmKernel& packed_gemm_avx2() {
  static const PackedGemmKernel kernel{"avx2 6x16", kMR, kNR, kKC, kMC, kNC, kSlack, pack_a, pack_b, tile,
                                       nullptr, 2, tile_short};
  return kernel;
}

}  // namespace hg::kernels::cpu

#endif  // HG_X86
