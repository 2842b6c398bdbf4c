// The AMX bf16 microkernel (Intel Sapphire Rapids and later): eight tile registers of up to
// 16 rows x 64 bytes, and one instruction, tdpbf16ps, that multiplies a 16 x 32 bf16 tile by a
// 32 x 16 one (k in pairs) into a 16 x 16 f32 tile -- 16 x 16 x 32 multiply-adds, 16 times what
// vdpbf16ps does, so on these CPUs the bf16 GEMM runs on tiles. The f32 GEMM stays AVX-512's.
//
// One 32 x 32 tile of C is four accumulator tiles (tmm0-3), fed per 32-deep k chunk by two A
// tiles (tmm4-5: rows 0-15 and 16-31, 32 k each) and two B tiles (tmm6-7: 16 k-pairs x 16 columns
// each, the VNNI layout -- exactly AVX512-BF16's [k/2][nr][2] panels, so B is packed by the same
// packer). A is packed as [k/32][32 rows][32 k]: each A tile is 1 KB of contiguous memory.
#include "core/simd_target.h"
#if HG_X86

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_microkernel.h"

#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace hg::kernels::cpu {

namespace {

constexpr int64_t kMR = 32;      // C tile rows: two accumulator tiles of 16 rows
constexpr int64_t kNR = 32;      // C tile columns: two of 16 (AVX-512's nr, so B panels are shared)
constexpr int64_t kTileK = 32;   // k per A tile row (64 bytes of bf16)
constexpr int64_t kChunkPairs = kTileK / 2;

// The tile configuration (palette 1): every register 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

}  // namespace

HG_TARGET_BEGIN(HG_AMX_FEATURES)
namespace {

inline __mmask32 first_words(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// A block of A (rows i0.., depth kc from k0) as [k/32][32 rows][32 k] panels, zeros past the edges.
// (Rows at a.row_offsets where given: each is contiguous, so the copies are the same.)
void pack_a_tiles(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint16_t* out) {
  const int64_t chunks = (kc + kTileK - 1) / kTileK;
  const auto* base = static_cast<const uint16_t*>(a.data);
  if (a.col_stride != 1) {
    // Rows run along memory: the block's k-pairs first (all its panels in one pass over A's
    // k-rows), then each 16 x 16 block of pairs turned around into the panels' tile rows.
    thread_local std::vector<float> pairs;
    const int64_t panel_words = chunks * kChunkPairs * kMR;
    pairs.resize(size_t((mc + kMR - 1) / kMR * panel_words));
    pack_bf16_pairs(base, a.row_stride, a.col_stride, i0, mc, k0, kc, kMR, chunks * kChunkPairs,
                    reinterpret_cast<uint16_t*>(pairs.data()));
    for (int64_t p = 0; p < mc; p += kMR) {
      const float* panel_pairs = pairs.data() + p / kMR * panel_words;
      float* words = reinterpret_cast<float*>(out + p * chunks * kTileK);
      for (int64_t c = 0; c < chunks; ++c)
        for (int64_t half = 0; half < kMR; half += 16)
          transpose_words(panel_pairs + c * kChunkPairs * kMR + half, kMR, kChunkPairs, 16,
                          words + (c * kMR + half) * kChunkPairs, kChunkPairs);
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t valid = std::min(kMR, mc - p);
    uint16_t* panel = out + p * chunks * kTileK;
    // k runs along memory: each tile row is one masked 64-byte copy
    for (int64_t c = 0; c < chunks; ++c) {
      const __mmask32 depth = first_words(kc - c * kTileK);
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t i = i0 + p + r, start = a.row_offsets ? a.row_offsets[std::min(i, a.rows - 1)] : i * a.row_stride;
        const uint16_t* src = base + start + k0 + c * kTileK;
        const __m512i row = r < valid ? _mm512_maskz_loadu_epi16(depth, src) : _mm512_setzero_si512();
        _mm512_store_si512(panel + (c * kMR + r) * kTileK, row);
      }
    }
  }
}

void pack_b_tiles(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, uint16_t* out) {
  const int64_t chunks = (kc + kTileK - 1) / kTileK;
  pack_bf16_pairs(static_cast<const uint16_t*>(b.data), b.col_stride, b.row_stride, j0, nc, k0, kc, kNR,
                  chunks * kChunkPairs, out, b.row_offsets);
}

// sums + [C +] [bias], then relu (TileStore), as the AVX-512 microkernels store theirs.
inline __m512 stored(__m512 sums, __mmask16 valid, const float* c, const float* bias, const TileStore& store) {
  const __m512 b = bias ? _mm512_maskz_loadu_ps(valid, bias) : _mm512_setzero_ps();
  if (store.add_to_c) sums = _mm512_add_ps(sums, _mm512_add_ps(_mm512_maskz_loadu_ps(valid, c), b));
  else sums = _mm512_add_ps(sums, b);
  return store.relu ? _mm512_max_ps(_mm512_setzero_ps(), sums) : sums;
}

void tile_amx(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
              const TileStore& store) {
  constexpr int64_t a_chunk = kMR * kTileK, b_chunk = kChunkPairs * kNR * 2, b_stride = kNR * 2 * sizeof(uint16_t);
  alignas(64) float sums[kMR * kNR];
  _tile_zero(0);
  _tile_zero(1);
  if (rows > 16) {
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t chunk = 0; chunk < pairs / kChunkPairs; ++chunk) {
      _tile_loadd(4, a + chunk * a_chunk, kTileK * 2);
      _tile_loadd(5, a + chunk * a_chunk + 16 * kTileK, kTileK * 2);
      _tile_loadd(6, b + chunk * b_chunk, b_stride);
      _tile_loadd(7, b + chunk * b_chunk + 32, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(2, sums + 16 * kNR, kNR * sizeof(float));
    _tile_stored(3, sums + 16 * kNR + 16, kNR * sizeof(float));
  } else {  // a short panel (small M): the lower half of the tile would multiply padding
    for (int64_t chunk = 0; chunk < pairs / kChunkPairs; ++chunk) {
      _tile_loadd(4, a + chunk * a_chunk, kTileK * 2);
      _tile_loadd(6, b + chunk * b_chunk, b_stride);
      _tile_loadd(7, b + chunk * b_chunk + 32, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
    }
  }
  _tile_stored(0, sums, kNR * sizeof(float));
  _tile_stored(1, sums + 16, kNR * sizeof(float));
  const __mmask16 left = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 right = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    _mm512_mask_storeu_ps(row, left, stored(_mm512_load_ps(sums + i * kNR), left, row, store.bias, store));
    _mm512_mask_storeu_ps(row + 16, right,
                          stored(_mm512_load_ps(sums + i * kNR + 16), right, row + 16,
                                 store.bias ? store.bias + 16 : nullptr, store));
  }
}

void load_tile_config() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

void release_tiles() { _tile_release(); }

}  // namespace
HG_TARGET_END

const PackedGemmKernel& packed_gemm_amx() {
  static const Bf16Microkernel tiles{kMR, kTileK, pack_a_tiles, pack_b_tiles, tile_amx, load_tile_config, release_tiles};
  static const PackedGemmKernel kernel = [] {
    PackedGemmKernel with_tiles = packed_gemm_avx512bf16();
    with_tiles.name = "amx 32x32 (bf16) + avx512 12x32";
    with_tiles.bf16 = &tiles;
    return with_tiles;
  }();
  return kernel;
}

}  // namespace hg::kernels::cpu

#endif  // HG_X86
