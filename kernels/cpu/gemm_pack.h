// The f32 packers' skeleton, the same for every CPU level: A[i0:i0+mc, k0:k0+kc] into panels of
// MR rows (k-major inside a panel), B[k0:k0+kc, j0:j0+nc] into panels of NR columns. A level
// supplies its block transpose, W x W floats at a time -- `lanes` source rows of `depth`
// contiguous values (rows src_stride apart) become `depth` destination rows of `lanes` values
// (rows dst_stride apart):
//
//   pack_a_panels<kMR, 16>(a, i0, mc, k0, kc, out, transpose_block);   // gemm_avx512.cpp
//
// It is used where a source runs along memory in the direction the panel does not: a row-major A
// (rows contiguous along k) or a column-major B (a transposed view). Other layouts are copied:
// a row of a panel is one memcpy for a row-major B or a column-major A (whole panels), element by
// element elsewhere.
//
// NOTE: always_inline, and compiled in the caller's target region: inlined into a level's
// pack_a/pack_b, the skeleton and its transpose become one function of that level's instruction
// set (a call through a pointer per block would cost more than the transpose).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm.h"

namespace hg::kernels::cpu {

// NOTE: a partial panel is zeroed once and then its valid lanes written. Zeroing the few padding
// lanes per k instead compiles to a `rep stos` per k, whose start-up cost dominated products
// with a short dimension (conv weight gradients: 9 x 784 @ 784 x 16).
template <int64_t MR, int64_t W, class Transpose>
[[gnu::always_inline]] inline void pack_a_panels(const MatrixView& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                                                 float* out, const Transpose& transpose) {
  const float* base = static_cast<const float*>(a.data);
  if (a.row_stride == 1 && a.col_stride != 1) {
    // Column-major (a transposed view, as in a weight gradient's dY^T X): k outermost, so that each
    // k reads the block's mc values in one run; panel by panel, every k would touch another page.
    const int64_t full = mc / MR * MR, rest = mc - full;
    if (rest > 0) std::memset(out + full * kc, 0, sizeof(float) * size_t(kc * MR));
    for (int64_t k = 0; k < kc; ++k) {
      const float* column = base + i0 + (k0 + k) * a.col_stride;
      for (int64_t p = 0; p < full; p += MR) std::memcpy(out + p * kc + k * MR, column + p, sizeof(float) * MR);
      for (int64_t r = 0; r < rest; ++r) out[full * kc + k * MR + r] = column[full + r];
    }
    return;
  }
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t rows = std::min(MR, mc - p);
    float* panel = out + p * kc;
    if (rows < MR) std::memset(panel, 0, sizeof(float) * size_t(kc * MR));
    const float* origin = base + (i0 + p) * a.row_stride + k0 * a.col_stride;
    if (a.col_stride == 1) {  // row-major: each row is contiguous along k
      for (int64_t k = 0; k < kc; k += W)
        transpose(origin + k, a.row_stride, rows, std::min<int64_t>(W, kc - k), panel + k * MR, MR);
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t r = 0; r < rows; ++r) panel[k * MR + r] = origin[r * a.row_stride + k * a.col_stride];
    }
  }
}

template <int64_t NR, int64_t W, class Transpose>
[[gnu::always_inline]] inline void pack_b_panels(const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                                                 float* out, const Transpose& transpose) {
  const float* base = static_cast<const float*>(b.data);
  const bool column_major = b.row_stride == 1 && b.col_stride != 1;
  if (b.col_stride == 1) {
    // Row-major: a panel takes NR values of each of the kc rows. Panel by panel, that reads kc rows
    // at once, more streams than a prefetcher follows (a 2048 x 512 B packed at ~2 GB/s, a third of
    // its GEMM's time on Zen 3); kRows rows at a time across all panels reads kRows streams in order.
    constexpr int64_t kRows = 8;
    for (int64_t q = 0; q < nc; q += NR)
      if (nc - q < NR) std::memset(out + q * kc, 0, sizeof(float) * size_t(kc * NR));
    for (int64_t k = 0; k < kc; k += kRows) {
      const int64_t rows = std::min(kRows, kc - k);
      const float* origin = base + (k0 + k) * b.row_stride + j0;
      for (int64_t q = 0; q < nc; q += NR) {
        float* dst = out + q * kc + k * NR;
        const float* src = origin + q;
        if (nc - q >= NR) {
          for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * NR, src + r * b.row_stride, sizeof(float) * NR);
        } else {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < nc - q; ++c) dst[r * NR + c] = src[r * b.row_stride + c];
        }
      }
    }
    return;
  }
  for (int64_t q = 0; q < nc; q += NR) {
    const int64_t cols = std::min(NR, nc - q);
    float* panel = out + q * kc;
    if (cols < NR) std::memset(panel, 0, sizeof(float) * size_t(kc * NR));
    const float* origin = base + k0 * b.row_stride + (j0 + q) * b.col_stride;
    if (column_major) {  // each column is contiguous along k
      for (int64_t c = 0; c < cols; c += W)
        for (int64_t k = 0; k < kc; k += W)
          transpose(origin + c * b.col_stride + k, b.col_stride, std::min<int64_t>(W, cols - c),
                    std::min<int64_t>(W, kc - k), panel + k * NR + c, NR);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t c = 0; c < cols; ++c) panel[k * NR + c] = origin[k * b.row_stride + c * b.col_stride];
  }
}

}  // namespace hg::kernels::cpu
