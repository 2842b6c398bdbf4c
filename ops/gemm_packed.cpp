// The packed AVX-512 GEMM (see gemm_packed.h).
#include "ops/gemm_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "core/visit.h"
#include "ops/gemm.h"

namespace hg::detail {

namespace {

constexpr int64_t kMR = 12;    // tile rows: 12 x 2 accumulators + 2 B vectors + 1 broadcast <= 32 zmm
constexpr int64_t kNR = 32;    // tile columns: two zmm of 16 floats
constexpr int64_t kKC = 256;   // depth of one packed slice: an A panel (12 x 256 x 4 B) stays in L1
constexpr int64_t kMC = 96;    // rows per A block (8 panels): the block stays in L2
constexpr int64_t kNC = 512;   // columns per B block: a 256 x 512 f32 panel (512 KB) stays in L2

template <class T>
inline float load(const T* p) {
  return float(Acc<T>(*p));
}

// A[i0:i0+mc, k0:k0+kc] -> panels of kMR rows: panel p holds, for each k, rows p*kMR .. +kMR.
template <class T>
void pack_a(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  const T* base = static_cast<const T*>(a.data);
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min(kMR, mc - p);
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = out + p * kc + k * kMR;
      const T* src = base + (i0 + p) * a.row_stride + (k0 + k) * a.col_stride;
      int64_t r = 0;
      for (; r < rows; ++r) dst[r] = load(src + r * a.row_stride);
      for (; r < kMR; ++r) dst[r] = 0.0f;
    }
  }
}

// B[k0:k0+kc, j0:j0+nc] -> panels of kNR columns: panel q holds, for each k, columns q*kNR .. +kNR.
// NOTE: the loops follow B's layout, so the source is always read contiguously: row by row for
// a row-major B, column by column for a column-major one (e.g. a transposed view).
template <class T>
void pack_b(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  const T* base = static_cast<const T*>(b.data);
  const bool column_major = b.row_stride == 1 && b.col_stride != 1;
  for (int64_t q = 0; q < nc; q += kNR) {
    const int64_t cols = std::min(kNR, nc - q);
    float* panel = out + q * kc;
    if (column_major) {
      for (int64_t c = 0; c < cols; ++c) {
        const T* src = base + k0 + (j0 + q + c) * b.col_stride;
        for (int64_t k = 0; k < kc; ++k) panel[k * kNR + c] = load(src + k);
      }
      for (int64_t k = 0; k < kc; ++k) std::fill(panel + k * kNR + cols, panel + (k + 1) * kNR, 0.0f);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      float* dst = panel + k * kNR;
      const T* src = base + (k0 + k) * b.row_stride + (j0 + q) * b.col_stride;
      int64_t c = 0;
      if constexpr (std::is_same_v<T, float>) {
        if (b.col_stride == 1) {
          std::memcpy(dst, src, size_t(cols) * sizeof(float));
          c = cols;
        }
      }
      for (; c < cols; ++c) dst[c] = load(src + c * b.col_stride);
      for (; c < kNR; ++c) dst[c] = 0.0f;
    }
  }
}

// One tile: C[0:rows, 0:cols] = (or +=) A_panel @ B_panel. The padded rows and columns of the
// panels are zeros; only the valid part is stored (masked stores for the columns).
__attribute__((target("avx512f"))) void microkernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                                   int64_t rows, int64_t cols, bool overwrite) {
  __m512 acc[kMR][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNR), b1 = _mm512_load_ps(b + k * kNR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[k * kMR + i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  const __mmask16 left = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 right = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i) {
    if (i >= rows) break;
    float* row = c + i * ldc;
    if (!overwrite) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(left, row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(right, row + 16));
    }
    _mm512_mask_storeu_ps(row, left, acc[i][0]);
    _mm512_mask_storeu_ps(row + 16, right, acc[i][1]);
  }
}

struct Scratch {
  std::vector<float, std::allocator<float>> data;
  float* get(size_t n) {
    if (data.size() < n + 16) data.resize(n + 16);
    // 64-byte alignment for the aligned panel loads
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(data.data()) + 63) & ~uintptr_t(63));
  }
};

}  // namespace

bool packed_gemm_available() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

template <class T>
void packed_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, bool accumulate) {
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  // NOTE: packing buffers are reused per thread: a fresh 2 MB allocation per call would cost
  // page faults comparable to the multiply itself for MLP-sized matrices.
  thread_local Scratch b_scratch;
  for (int64_t j0 = 0; j0 < N; j0 += kNC) {
    const int64_t nc = std::min(kNC, N - j0);
    const int64_t nc_padded = (nc + kNR - 1) / kNR * kNR;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      const bool overwrite = k0 == 0 && !accumulate;
      float* packed_b = b_scratch.get(size_t(kc * nc_padded));
      pack_b<T>(b, k0, kc, j0, nc, packed_b);
      const int64_t row_blocks = (M + kMC - 1) / kMC;
      const int64_t col_panels = nc_padded / kNR;
      // Tasks: (row block, group of column panels), so small-M products still use every thread.
      const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(col_panels, get_num_threads() * 2 / row_blocks));
      const int64_t panels_per_group = (col_panels + groups - 1) / groups;
      const int64_t work = 2 * M * nc * kc;
      parallel_for(0, row_blocks * groups, work >= (int64_t(1) << 20) ? 1 : row_blocks * groups, [&](int64_t lo, int64_t hi) {
        thread_local Scratch a_scratch;
        float* packed_a = a_scratch.get(size_t(kMC * kc));
        int64_t packed_block = -1;
        for (int64_t task = lo; task < hi; ++task) {
          const int64_t block = task / groups, group = task % groups;
          const int64_t i0 = block * kMC, mc = std::min(kMC, M - i0);
          if (packed_block != block) {
            pack_a<T>(a, i0, mc, k0, kc, packed_a);
            packed_block = block;
          }
          const int64_t q_end = std::min(col_panels, (group + 1) * panels_per_group);
          for (int64_t q = group * panels_per_group; q < q_end; ++q) {
            const int64_t j = q * kNR, cols = std::min(kNR, nc - j);
            for (int64_t p = 0; p < mc; p += kMR) {
              const int64_t rows = std::min(kMR, mc - p);
              float* tile = c + (i0 + p) * ldc + j0 + j;
              const float* ap = packed_a + p * kc;
              const float* bp = packed_b + j * kc;
              microkernel(kc, ap, bp, tile, ldc, rows, cols, overwrite);
            }
          }
        }
      });
    }
  }
}

template void packed_gemm<float>(const MatrixView&, const MatrixView&, float*, int64_t, bool);
template void packed_gemm<half>(const MatrixView&, const MatrixView&, float*, int64_t, bool);
template void packed_gemm<bfloat16>(const MatrixView&, const MatrixView&, float*, int64_t, bool);

}  // namespace hg::detail
