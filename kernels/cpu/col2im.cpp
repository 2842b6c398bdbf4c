// col2im_stride1 for each CPU level (see col2im.h). The vector versions gather, for each image
// row, every kernel tap that lands on it in a register and store the row once, instead of
// adding shifted rows into memory one after another (each overlapping store would stall the
// load that follows it).
//
// With stride 1, image column iw of row ih takes, from tap (i, j), the column entry at output
// row oh = ih + pad - i and output column ow = iw + pad - j, when both are inside the output:
// for a run of image columns, a run of consecutive entries of one column-matrix row.
#include "kernels/cpu/col2im.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "core/simd_target.h"
#include "kernels/cpu/avx2_lanes.h"

#if HG_X86
// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (masked loads);
// a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif

namespace hg::kernels::cpu {

namespace {

// The image columns [first, last) of the run starting at w0 that tap column j reads, and where
// in the column matrix's row the run starts: entry ow = iw + pad - j.
struct TapRun {
  int64_t first, last;
};
inline TapRun tap_run(const Col2imShape& g, int64_t w0, int64_t lanes, int64_t j) {
  return {std::max(w0, j - g.pad), std::min(w0 + lanes, g.OW - g.pad + j)};
}

inline const float* tap_row(const float* cols, int64_t pitch, const Col2imShape& g, int64_t c, int64_t i, int64_t j,
                            int64_t oh) {
  return cols + ((c * g.kh + i) * g.kw + j) * pitch + oh * g.OW;
}

void col2im_stride1_generic(const float* cols, int64_t pitch, const Col2imShape& g, float* image) {
  std::memset(image, 0, sizeof(float) * size_t(g.C * g.H * g.W));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ih = 0; ih < g.H; ++ih) {
      float* row = image + (c * g.H + ih) * g.W;
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t oh = ih + g.pad - i;
        if (oh < 0 || oh >= g.OH) continue;
        for (int64_t j = 0; j < g.kw; ++j) {
          const auto [first, last] = tap_run(g, 0, g.W, j);
          const float* src = tap_row(cols, pitch, g, c, i, j, oh);
          for (int64_t iw = first; iw < last; ++iw) row[iw] += src[iw + g.pad - j];
        }
      }
    }
}

}  // namespace

#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace {

using avx2::lanes_between;

// AVX2 has no expand: the run is loaded from its (in-bounds) start with a masked load and moved
// up to its lanes with a lane permute; lanes outside it are zeroed.
void col2im_stride1_avx2(const float* cols, int64_t pitch, const Col2imShape& g, float* image) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t w0 = 0; w0 < g.W; w0 += 8) {
        const int64_t lanes = std::min<int64_t>(8, g.W - w0);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t oh = ih + g.pad - i;
          if (oh < 0 || oh >= g.OH) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const auto [first, last] = tap_run(g, w0, lanes, j);
            if (last <= first) continue;
            const float* src = tap_row(cols, pitch, g, c, i, j, oh) + (first + g.pad - j);
            const int64_t shift = first - w0, count = last - first;
            __m256 v = count == 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, lanes_between(0, count));
            if (shift > 0)
              v = _mm256_and_ps(_mm256_permutevar8x32_ps(v, _mm256_sub_epi32(index, _mm256_set1_epi32(int(shift)))),
                                _mm256_castsi256_ps(lanes_between(shift, shift + count)));
            sum = _mm256_add_ps(sum, v);
          }
        }
        float* dst = image + (c * g.H + ih) * g.W + w0;
        if (lanes == 8) _mm256_storeu_ps(dst, sum);
        else _mm256_maskstore_ps(dst, lanes_between(0, lanes), sum);
      }
}

}  // namespace
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace {

inline __mmask16 lane_range(int64_t lo, int64_t hi) {  // lanes lo <= l < hi (empty when hi <= lo)
  if (hi <= lo) return 0;
  return __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
}

void col2im_stride1_avx512(const float* cols, int64_t pitch, const Col2imShape& g, float* image) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t w0 = 0; w0 < g.W; w0 += 16) {
        const int64_t lanes = std::min<int64_t>(16, g.W - w0);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t oh = ih + g.pad - i;
          if (oh < 0 || oh >= g.OH) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            // A masked load of the run (in bounds), expanded to its lanes (vexpandps's register
            // form; the memory form is microcoded and slow on Zen 4).
            const auto [first, last] = tap_run(g, w0, lanes, j);
            if (last <= first) continue;
            const float* src = tap_row(cols, pitch, g, c, i, j, oh) + (first + g.pad - j);
            const __m512 v = _mm512_maskz_loadu_ps(lane_range(0, last - first), src);
            sum = _mm512_add_ps(sum, _mm512_maskz_expand_ps(lane_range(first - w0, last - w0), v));
          }
        }
        _mm512_mask_storeu_ps(image + (c * g.H + ih) * g.W + w0, lane_range(0, lanes), sum);
      }
}

}  // namespace
HG_TARGET_END
#endif  // HG_X86

void col2im_stride1(const float* cols, int64_t pitch, const Col2imShape& g, float* image) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return col2im_stride1_avx512(cols, pitch, g, image);
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return col2im_stride1_avx2(cols, pitch, g, image);
#endif
  col2im_stride1_generic(cols, pitch, g, image);
}

}  // namespace hg::kernels::cpu
