// The wide-columns convolution (kernels/cpu/conv_wide_columns.h): one padded plane per batch of
// images, one GEMM whose right operand is the plane read through per-tap row offsets, and the
// valid columns gathered back into each image. Compiled for AVX512-BF16, the only level that
// reaches it: the rows it moves are short (7 to 28 values) and of any length, which masked
// AVX-512 moves copy without a library call per row (std::copy_n made one memmove call per row).
#include "kernels/cpu/conv_wide_columns.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/simd_target.h"
#include "kernels/cpu/gemm.h"

#if HG_X86
#include <immintrin.h>
#endif

namespace hg::kernels::cpu {

bool wide_columns_apply(const ConvGeometry& g) {
  return g.stride == 1 && g.groups == 1 && g.pad <= g.dilation * (g.kw - 1) && !(g.kh == 1 && g.kw == 1 && g.pad == 0);
}

bool wide_columns_available() { return HG_X86 && hg::cpu::has_native_bf16() && has_native_bf16_gemm(); }

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512BF16_FEATURES)
namespace {

// n 16-bit values from src to dst (n of any size), 32 per masked move.
void copy_words(const uint16_t* src, uint16_t* dst, int64_t n) {
  for (int64_t k = 0; k < n; k += 32) {
    const __mmask32 m = n - k >= 32 ? ~__mmask32(0) : (__mmask32(1) << (n - k)) - 1;
    _mm512_mask_storeu_epi16(dst + k, m, _mm512_maskz_loadu_epi16(m, src + k));
  }
}

// n floats from src to dst, through relu when asked (max(0, x) keeps a NaN x: vmaxps returns its
// second operand on NaN, as math::Relu::fwd).
void copy_floats(const float* src, float* dst, int64_t n, bool relu) {
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, src + k);
    if (relu) v = _mm512_maskz_max_ps(m, _mm512_setzero_ps(), v);  // (the maskz form: GCC 12 warns on the plain one)
    _mm512_mask_storeu_ps(dst + k, m, v);
  }
}

void wide_columns_avx512bf16(const bfloat16* x, const bfloat16* w, const float* bias, bfloat16* out,
                             const ConvGeometry& g, bool relu, int64_t batch) {
  const int64_t Hp = g.H + 2 * g.pad, slot = g.W + g.pad, image = g.C * g.H * g.W, plane = g.O * g.ohw();
  const auto* input = reinterpret_cast<const uint16_t*>(x);
  parallel_for(0, g.N, batch, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<uint16_t> padded;
    thread_local std::vector<int64_t> row_offsets;
    thread_local std::vector<float> result, rows;
    for (int64_t n0 = lo; n0 < hi; n0 += batch) {
      const int64_t images = std::min(hi, n0 + batch) - n0, Wp = images * slot + g.pad, columns = g.OH * Wp;
      // The plane, then what the last row's taps read past it (into dropped columns): zeros.
      const int64_t plane_size = g.C * Hp * Wp, tail = g.dilation * (g.kw - 1) + 32;
      if (padded.size() < size_t(plane_size + tail)) padded.resize(size_t(plane_size + tail));
      std::memset(padded.data(), 0, sizeof(uint16_t) * size_t(plane_size + tail));
      for (int64_t b = 0; b < images; ++b)
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t h = 0; h < g.H; ++h)
            copy_words(input + (n0 + b) * image + (c * g.H + h) * g.W,
                       padded.data() + (c * Hp + h + g.pad) * Wp + g.pad + b * slot, g.W);
      row_offsets.resize(size_t(g.ckk()));
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j)
            row_offsets[size_t((c * g.kh + i) * g.kw + j)] = (c * Hp + i * g.dilation) * Wp + j * g.dilation;
      if (result.size() < size_t(g.O * columns)) result.resize(size_t(g.O * columns));
      for (int64_t o = 0; o < g.O; ++o) std::fill_n(result.data() + o * columns, columns, bias[o]);
      const MatrixView weight{w, g.O, g.ckk(), g.ckk(), 1};
      const MatrixView taps{padded.data(), g.ckk(), columns, 0, 1, row_offsets.data()};
      packed_gemm<bfloat16>(weight, taps, result.data(), columns, true);
      // Each image's output channels: the valid columns gathered (relu on the way), rounded once.
      if (rows.size() < size_t(g.ohw())) rows.resize(size_t(g.ohw()));
      for (int64_t b = 0; b < images; ++b)
        for (int64_t o = 0; o < g.O; ++o) {
          for (int64_t oh = 0; oh < g.OH; ++oh)
            copy_floats(result.data() + o * columns + oh * Wp + b * slot, rows.data() + oh * g.OW, g.OW, relu);
          convert_from_float(rows.data(), out + (n0 + b) * plane + o * g.ohw(), size_t(g.ohw()));
        }
    }
  });
}

}  // namespace
HG_TARGET_END
#endif

void conv2d_wide_columns(const bfloat16* x, const bfloat16* w, const float* bias, bfloat16* out, const ConvGeometry& g,
                         bool relu, int64_t images) {
  HG_CHECK(wide_columns_apply(g) && wide_columns_available(),
           "internal error: wide columns for a convolution or CPU level they do not serve");
#if HG_X86
  wide_columns_avx512bf16(x, w, bias, out, g, relu, std::max<int64_t>(images, 1));
#else
  (void)x, (void)w, (void)bias, (void)out, (void)relu, (void)images;  // (never reached: not available)
#endif
}

}  // namespace hg::kernels::cpu
