// The wide-columns convolution (kernels/cpu/conv_wide_columns.h): one padded plane per batch of
// images, one GEMM whose right operand is the plane read through per-tap row offsets, and the
// valid columns rounded straight into each image's rows. Compiled for AVX512-BF16, the only level
// that reaches it: the rows it moves are short (7 to 28 values) and of any length, which masked
// AVX-512 moves copy without a library call per row (std::copy_n made one memmove call per row,
// and convert_from_float one dispatch per row).
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

// n floats from src (through relu when asked) rounded to bf16 at dst, as
// convert_from_float rounds them at this level: vcvtneps2bf16, except that the lanes holding a
// float subnormal (which the instruction flushes to zero) are rounded by the portable code.
// relu is max(0, x), which keeps a NaN x (vmaxps returns its second operand on NaN) and -0, as
// math::Relu::fwd.
void store_row(const float* src, uint16_t* dst, int64_t n, bool relu) {
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff), smallest_normal = _mm512_set1_epi32(0x00800000);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, src + k);
    if (relu) v = _mm512_maskz_max_ps(m, _mm512_setzero_ps(), v);  // (the maskz form: GCC 12 warns on the plain one)
    _mm256_mask_storeu_epi16(dst + k, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(v), magnitude_mask);
    const __mmask16 subnormal =
        _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(magnitude, magnitude), magnitude, smallest_normal);
    if (subnormal) {
      alignas(64) float values[16];
      _mm512_store_ps(values, v);
      for (int lane = 0; lane < 16; ++lane)
        if (subnormal & (1u << lane)) dst[k + lane] = detail::float_to_bf16_bits_portable(values[lane]);
    }
  }
}

void wide_columns_avx512bf16(const bfloat16* x, const bfloat16* w, const float* bias, bfloat16* out,
                             const ConvGeometry& g, bool relu, int64_t batch) {
  const int64_t Hp = g.H + 2 * g.pad, slot = g.W + g.pad, image = g.C * g.H * g.W, plane = g.O * g.ohw();
  const auto* input = reinterpret_cast<const uint16_t*>(x);
  parallel_for(0, g.N, batch, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<uint16_t> padded;
    thread_local std::vector<int64_t> row_offsets;
    thread_local std::vector<float> result;
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
      // Each image's output rows: the valid columns (relu on the way), rounded once.
      auto* output = reinterpret_cast<uint16_t*>(out);
      for (int64_t b = 0; b < images; ++b)
        for (int64_t o = 0; o < g.O; ++o)
          for (int64_t oh = 0; oh < g.OH; ++oh)
            store_row(result.data() + o * columns + oh * Wp + b * slot, output + (n0 + b) * plane + (o * g.OH + oh) * g.OW,
                      g.OW, relu);
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
