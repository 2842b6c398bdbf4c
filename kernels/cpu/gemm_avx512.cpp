// The AVX-512 packed-GEMM kernels (see gemm_microkernel.h): a 12 x 32 f32 microkernel (24 zmm
// accumulators), packers that transpose 16 x 16 blocks in registers, and, for CPUs with
// AVX512-BF16, a microkernel on bf16 pairs (vdpbf16ps: 32 multiply-adds per instruction, twice
// an f32 FMA) with its bf16 packers.
#include "core/simd_target.h"
#if HG_X86

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_pack.h"

// NOTE: GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics (masked loads
// and stores); a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace hg::kernels::cpu {

namespace {

constexpr int64_t kMR = 12;    // tile rows: 12 x 2 accumulators + 2 B vectors + 1 broadcast <= 32 zmm
constexpr int64_t kNR = 32;    // tile columns: two zmm of 16 floats
constexpr int64_t kKC = 256;   // depth of one packed slice: an A panel (12 x 256 x 4 B) stays in L1
constexpr int64_t kMC = 96;    // rows per A block (8 panels): the block stays in L2
constexpr int64_t kNC = 512;   // columns per B block: a 256 x 512 f32 panel (512 KB) stays in L2

}  // namespace

HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace {

// ---- packing ------------------------------------------------------------------------------------

// In-register transpose of a 16 x 16 block: r[i] holds row i; afterwards r[j] holds column j.
// Three rounds of shuffles: 32-bit pairs, 64-bit pairs, then 128-bit lanes (twice).
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
  }
}

// Transposes up to 16 x 16 floats: `lanes` source rows (row r at src + r*src_stride, `depth`
// contiguous values) become `depth` destination rows (row k at dst + k*dst_stride, `lanes`
// values). Nothing outside those is read or written. The packers' transposing case: a
// row-major A or a column-major B, read along memory and written panel-major, 16 x 16 at a time
// instead of one scalar load and store per value.
void transpose_block(const float* src, int64_t src_stride, int64_t lanes, int64_t depth, float* dst, int64_t dst_stride) {
  const __mmask16 depth_mask = depth >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << depth) - 1);
  const __mmask16 lane_mask = lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < lanes ? _mm512_maskz_loadu_ps(depth_mask, src + i * src_stride) : _mm512_setzero_ps();
  transpose16(r);
  for (int k = 0; k < depth; ++k) _mm512_mask_storeu_ps(dst + k * dst_stride, lane_mask, r[k]);
}

void pack_a(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  pack_a_panels<kMR, 16>(a, i0, mc, k0, kc, out, transpose_block);
}

void pack_b(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  pack_b_panels<kNR, 16>(b, k0, kc, j0, nc, out, transpose_block);
}

// ---- the f32 microkernel ------------------------------------------------------------------------

// What a row of sums becomes in C (TileStore): sums + [C +] [bias], then relu. max(0, x) keeps a
// NaN x and a -0 x: vmaxps returns its second operand on NaN and on equal zeros, as Relu::fwd.
inline __m512 stored(__m512 sums, __mmask16 valid, const float* c, __m512 bias, const TileStore& store) {
  if (store.add_to_c) {
    const __m512 old = _mm512_maskz_loadu_ps(valid, c);
    sums = _mm512_add_ps(sums, store.bias ? _mm512_add_ps(old, bias) : old);
  } else if (store.bias) {
    sums = _mm512_add_ps(sums, bias);
  }
  return store.relu ? _mm512_max_ps(_mm512_setzero_ps(), sums) : sums;
}

// Stores the valid rows and columns of an R x 32 tile of accumulators, as `store` says.
template <int R>
inline void store_tile(__m512 (&acc)[R][2], float* c, int64_t ldc, int64_t rows, int64_t cols,
                       const TileStore& store) {
  const __mmask16 left = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 right = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  const __m512 bias0 = store.bias ? _mm512_maskz_loadu_ps(left, store.bias) : _mm512_setzero_ps();
  const __m512 bias1 = store.bias ? _mm512_maskz_loadu_ps(right, store.bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    if (i >= rows) break;
    float* row = c + i * ldc;
    _mm512_mask_storeu_ps(row, left, stored(acc[i][0], left, row, bias0, store));
    _mm512_mask_storeu_ps(row + 16, right, stored(acc[i][1], right, row + 16, bias1, store));
  }
}

// Asks for a tile row of C (32 floats, two cache lines) before the k loop, so that it has
// arrived by the time the tile is stored: C is the one operand not packed, and at 1024^2 and
// beyond it is out of L2.
inline void prefetch_row(const float* row) {
  _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(row + kNR - 1), _MM_HINT_T0);
}

// One tile of R <= kMR rows: C[0:rows, 0:cols] = (or +=) A_panel @ B_panel, reading the first R
// rows of the panel. The padded rows and columns of the panels are zeros; only the valid part is
// stored (masked stores for the columns).
template <int R>
void tile_rows(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
               const TileStore& store) {
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    prefetch_row(c + i * ldc);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNR), b1 = _mm512_load_ps(b + k * kNR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a[k * kMR + i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  store_tile<R>(acc, c, ldc, rows, cols, store);
}

// tile_rows reading A's rows where they are (row i at a + i * lda) instead of a packed panel: the
// same broadcasts, each from its row. Rows past `rows` read the last valid one (their sums are
// computed, never stored), so nothing past A is read.
template <int R>
void tile_rows_direct(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t rows,
                      int64_t cols, const TileStore& store) {
  __m512 acc[R][2];
  const float* row[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    row[i] = a + std::min<int64_t>(i, rows - 1) * lda;
    prefetch_row(c + i * ldc);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNR), b1 = _mm512_load_ps(b + k * kNR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(row[i][k]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  store_tile<R>(acc, c, ldc, rows, cols, store);
}

// A panel's last tile runs only the rows it has, in steps of 4: M = 32 (an LSTM's batch) is
// panels of 12, 12 and 8, and the 12-row tile spent a third of the last one's FMAs on zeros
// (32 x 512 x 2048 against a prepacked B: the same time as 36 rows). Each value's sum is the same
// either way.
template <class Run>
void with_tile_rows(int64_t rows, const Run& run) {
  if (rows <= 4) run.template operator()<4>();
  else if (rows <= 8) run.template operator()<8>();
  else run.template operator()<int(kMR)>();
}
void tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
          const TileStore& store) {
  with_tile_rows(rows, [&]<int R>() { tile_rows<R>(kc, a, b, c, ldc, rows, cols, store); });
}
// (PackedGemmKernel::tile_direct)
void tile_direct(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, int64_t rows,
                 int64_t cols, const TileStore& store) {
  with_tile_rows(rows, [&]<int R>() { tile_rows_direct<R>(kc, a, lda, b, c, ldc, rows, cols, store); });
}

// ---- bf16 packing (pairs of k) ------------------------------------------------------------------

// Both packers follow the source layout, so memory is read contiguously: when k runs along
// memory, the pair (k, k+1) is one 32-bit word to copy; otherwise two k-rows are interleaved.

// Writes the k pairs of one panel lane (a row of A or a column of B) whose k run is contiguous.
inline void pack_pairs_contiguous(const uint16_t* src, int64_t kc, uint16_t* dst, int64_t lane_step) {
  const int64_t full = kc / 2;
  for (int64_t kk = 0; kk < full; ++kk) std::memcpy(dst + kk * lane_step, src + 2 * kk, 4);
  if (kc % 2) dst[full * lane_step] = src[kc - 1], dst[full * lane_step + 1] = 0;
}

inline __mmask32 first_words(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// Interleaves two k-rows of `valid` (<= 32) lanes into `width` (<= 32) pairs, zero past `valid`;
// k_odd is null past an odd depth. Two vpermt2w build the 32 pairs of 16-bit values at once.
void interleave_pair(const uint16_t* k_even, const uint16_t* k_odd, int64_t valid, int64_t width, uint16_t* dst) {
  alignas(64) static constexpr uint16_t kFirst[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kSecond[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __mmask32 lanes = first_words(valid);
  const __m512i even = _mm512_maskz_loadu_epi16(lanes, k_even);
  const __m512i odd = k_odd ? _mm512_maskz_loadu_epi16(lanes, k_odd) : _mm512_setzero_si512();
  _mm512_mask_storeu_epi16(dst, first_words(2 * std::min<int64_t>(width, 16)),
                           _mm512_permutex2var_epi16(even, _mm512_load_si512(kFirst), odd));
  if (width > 16)
    _mm512_mask_storeu_epi16(dst + 32, first_words(2 * (width - 16)),
                             _mm512_permutex2var_epi16(even, _mm512_load_si512(kSecond), odd));
}

}  // namespace

// (gemm_microkernel.h) Lanes are rows of A or columns of B.
void pack_bf16_pairs(const uint16_t* base, int64_t lane_stride, int64_t k_stride, int64_t lane0, int64_t lanes,
                     int64_t k0, int64_t kc, int64_t width, int64_t padded_pairs, uint16_t* out,
                     const int64_t* k_offsets) {
  const int64_t pairs = (kc + 1) / 2, full_pairs = kc / 2;
  if (k_offsets == nullptr && lane_stride == 1 && k_stride != 1) {
    // Lanes run along memory (a transposed A, a row-major B): two k-rows are interleaved, k-pair
    // outermost so that each pair of k-rows is read across the whole block in one run. Panel by
    // panel, every k-row of a weight gradient's dY^T was another page for a few dozen bytes
    // (the same as the f32 packers' column-major A: gemm_pack.h).
    for (int64_t p = 0; p < lanes; p += width)
      std::memset(out + (p * padded_pairs + pairs * width) * 2, 0, sizeof(uint16_t) * size_t((padded_pairs - pairs) * width * 2));
    for (int64_t kk = 0; kk < pairs; ++kk) {
      const uint16_t* k_even = base + lane0 + (k0 + 2 * kk) * k_stride;
      const uint16_t* k_odd = 2 * kk + 1 < kc ? k_even + k_stride : nullptr;
      for (int64_t p = 0; p < lanes; p += width)
        interleave_pair(k_even + p, k_odd ? k_odd + p : nullptr, std::min(width, lanes - p), width,
                        out + (p * padded_pairs + kk * width) * 2);
    }
    return;
  }
  for (int64_t p = 0; p < lanes; p += width) {
    const int64_t valid = std::min(width, lanes - p);
    uint16_t* panel = out + p * padded_pairs * 2;
    std::memset(panel + pairs * width * 2, 0, sizeof(uint16_t) * size_t((padded_pairs - pairs) * width * 2));
    const uint16_t* origin = base + (lane0 + p) * lane_stride + k0 * k_stride;
    if (k_offsets != nullptr) {  // B's rows at irregular offsets (lanes along memory): interleave two k-rows
      const uint16_t* lanes_at = base + lane0 + p;
      for (int64_t kk = 0; kk < pairs; ++kk) {
        const int64_t k = k0 + 2 * kk;
        interleave_pair(lanes_at + k_offsets[k], 2 * kk + 1 < kc ? lanes_at + k_offsets[k + 1] : nullptr, valid, width,
                        panel + kk * width * 2);
      }
    } else if (k_stride == 1 && lane_stride % 2 == 0) {
      // k runs along memory, so each pair is a 32-bit word and the pack is a transpose of words:
      // done 16 x 16 in registers, like the f32 packs (the shuffles move bits, never convert).
      for (int64_t r = 0; r < valid; r += 16)
        for (int64_t kk = 0; kk < full_pairs; kk += 16)
          transpose_block(reinterpret_cast<const float*>(origin + r * lane_stride + 2 * kk), lane_stride / 2,
                          std::min<int64_t>(16, valid - r), std::min<int64_t>(16, full_pairs - kk),
                          reinterpret_cast<float*>(panel + (kk * width + r) * 2), width);
      if (kc % 2)
        for (int64_t r = 0; r < valid; ++r)
          panel[(full_pairs * width + r) * 2] = origin[r * lane_stride + kc - 1], panel[(full_pairs * width + r) * 2 + 1] = 0;
      for (int64_t kk = 0; kk < pairs; ++kk)
        std::memset(panel + (kk * width + valid) * 2, 0, sizeof(uint16_t) * size_t((width - valid) * 2));
    } else if (k_stride == 1) {  // k along memory at an odd lane stride: pair by pair
      for (int64_t r = 0; r < valid; ++r) pack_pairs_contiguous(origin + r * lane_stride, kc, panel + 2 * r, width * 2);
      for (int64_t kk = 0; kk < pairs; ++kk)
        std::memset(panel + (kk * width + valid) * 2, 0, sizeof(uint16_t) * size_t((width - valid) * 2));
    } else {  // a 1-wide dimension with an arbitrary stride
      for (int64_t kk = 0; kk < pairs; ++kk)
        for (int64_t r = 0; r < width; ++r)
          for (int64_t half = 0; half < 2; ++half) {
            const int64_t k = 2 * kk + half;
            panel[(kk * width + r) * 2 + half] = (r < valid && k < kc) ? origin[r * lane_stride + k * k_stride] : uint16_t(0);
          }
    }
  }
}

void transpose_words(const float* src, int64_t src_stride, int64_t lanes, int64_t depth, float* dst,
                     int64_t dst_stride) {
  transpose_block(src, src_stride, lanes, depth, dst, dst_stride);
}

namespace {

void pack_a_bf16(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint16_t* out) {
  if (a.row_offsets != nullptr) {  // rows at irregular offsets (contiguous each): gathered first, then packed
    thread_local std::vector<uint16_t> rows;
    const int64_t pitch = (kc + 1) / 2 * 2;
    rows.resize(size_t(mc * pitch));
    for (int64_t r = 0; r < mc; ++r)
      std::memcpy(rows.data() + r * pitch, static_cast<const uint16_t*>(a.data) + a.row_offsets[i0 + r] + k0,
                  sizeof(uint16_t) * size_t(kc));
    pack_bf16_pairs(rows.data(), pitch, 1, 0, mc, 0, kc, kMR, (kc + 1) / 2, out);
    return;
  }
  pack_bf16_pairs(static_cast<const uint16_t*>(a.data), a.row_stride, a.col_stride, i0, mc, k0, kc, kMR, (kc + 1) / 2,
                  out);
}

void pack_b_bf16(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, uint16_t* out) {
  pack_bf16_pairs(static_cast<const uint16_t*>(b.data), b.col_stride, b.row_stride, j0, nc, k0, kc, kNR, (kc + 1) / 2,
                  out, b.row_offsets);
}

}  // namespace
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512BF16_FEATURES)
namespace {

// vdpbf16ps multiplies pairs of bf16 and adds both products into an f32 lane.
// NOTE: it treats bf16 subnormal inputs as zero; bf16 subnormals (< 1.2e-38) carry no weight in
// a training step's products.
template <int R>
void tile_bf16_rows(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int64_t rows,
                    int64_t cols, const TileStore& store) {
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < pairs; ++kk) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + kk * kNR * 2);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + kk * kNR * 2 + 32);
    const uint32_t* pair = reinterpret_cast<const uint32_t*>(a + kk * kMR * 2);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(int(pair[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
  store_tile<R>(acc, c, ldc, rows, cols, store);
}

// As the f32 tile: a short last panel runs only the rows it has.
void tile_bf16(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
               const TileStore& store) {
  with_tile_rows(rows, [&]<int R>() { tile_bf16_rows<R>(pairs, a, b, c, ldc, rows, cols, store); });
}

}  // namespace
HG_TARGET_END

const PackedGemmKernel& packed_gemm_avx512() {
  static const PackedGemmKernel kernel{"avx512 12x32", kMR, kNR, kKC, kMC, kNC, 0, pack_a, pack_b, tile,
                                       nullptr, 0, nullptr, tile_direct};
  return kernel;
}

const PackedGemmKernel& packed_gemm_avx512bf16() {
  static const Bf16Microkernel pairs{kMR, 2, pack_a_bf16, pack_b_bf16, tile_bf16, nullptr, nullptr};
  static const PackedGemmKernel kernel{"avx512bf16 12x32", kMR, kNR, kKC, kMC, kNC, 0, pack_a, pack_b, tile,
                                       &pairs, 0, nullptr, tile_direct};
  return kernel;
}

}  // namespace hg::kernels::cpu

#endif  // HG_X86
