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
#include "kernels/cpu/wide_rows.h"

#if HG_X86
#include <immintrin.h>
#endif

// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (the widening
// conversions' undefined pass-through operand); a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hg::kernels::cpu {

bool wide_columns_apply(const ConvGeometry& g) {
  return wide_layout_serves(g) && !(g.kh == 1 && g.kw == 1 && g.pad == 0);
}

bool wide_columns_available() { return HG_X86 && hg::cpu::has_native_bf16() && has_native_bf16_gemm(); }

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512BF16_FEATURES)
namespace {

// A mask of the first n of 32 words (all of them from 32 on, none for n <= 0).
inline __mmask32 first_words(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}

// n 16-bit values from src to dst (n of any size), 32 per masked move.
void copy_words(const uint16_t* src, uint16_t* dst, int64_t n) {
  for (int64_t k = 0; k < n; k += 32) {
    const __mmask32 m = first_words(n - k);
    _mm512_mask_storeu_epi16(dst + k, m, _mm512_maskz_loadu_epi16(m, src + k));
  }
}

// src[0], src[2], ... to evens and src[1], src[3], ... to odds (n 16-bit values, any n), 64 at a
// time: one two-vector word permute for each half.
void deinterleave_words(const uint16_t* src, int64_t n, uint16_t* evens, uint16_t* odds) {
  alignas(64) static constexpr uint16_t kEven[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                     32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  const __m512i even_index = _mm512_load_si512(kEven), odd_index = _mm512_add_epi16(even_index, _mm512_set1_epi16(1));
  for (int64_t k = 0; k < n; k += 64) {
    const int64_t left = n - k;
    const __m512i a = _mm512_maskz_loadu_epi16(first_words(left), src + k);
    const __m512i b = _mm512_maskz_loadu_epi16(first_words(left - 32), src + k + 32);
    _mm512_mask_storeu_epi16(evens + k / 2, first_words((left + 1) / 2), _mm512_permutex2var_epi16(a, even_index, b));
    _mm512_mask_storeu_epi16(odds + k / 2, first_words(left / 2), _mm512_permutex2var_epi16(a, odd_index, b));
  }
}

// Images [n0, n0 + p.images) of x (N, C, H, W; bf16 bits) into a plane of the wide-rows layout
// (kernels/cpu/wide_rows.h), zeros around them and after it (what the last taps read past it).
// The zeros are written once per layout (ZeroedScratch): clearing the plane for every part was
// a third of the layout's time.
const uint16_t* lay_out_plane(const uint16_t* x, const ConvGeometry& g, int64_t n0, const WidePlane& p,
                              ZeroedScratch<uint16_t>& scratch) {
  const int64_t size = p.floats(g) + g.dilation * (g.kw - 1) + 32;
  uint16_t* plane = scratch.prepare(size, {g.C, g.H, g.W, g.pad, g.stride, p.images, size});
  if (p.phases == 4) {  // stride 2: each row split into its phase rows (as wide_rows.cpp's f32 layout)
    for (int64_t b = 0; b < p.images; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h) {
          const int64_t hp = h + g.pad;
          uint16_t* even_columns = plane + ((c * 4 + (hp & 1) * 2) * p.Hp + (hp >> 1)) * p.Wp + b * p.slot;
          uint16_t* const rows[2] = {even_columns, even_columns + p.Hp * p.Wp};
          deinterleave_words(x + ((n0 + b) * g.C + c) * g.H * g.W + h * g.W, g.W, rows[g.pad & 1] + (g.pad >> 1),
                             rows[(g.pad + 1) & 1] + ((g.pad + 1) >> 1));
        }
    return plane;
  }
  for (int64_t b = 0; b < p.images; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        copy_words(x + ((n0 + b) * g.C + c) * g.H * g.W + h * g.W, plane + (c * p.Hp + h + g.pad) * p.Wp + g.pad + b * p.slot,
                   g.W);
  return plane;
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

// The valid outputs among the plane's positions [col, col + cols) of rows (output channels)
// [row, row + rows), from a block of sums (leading dimension ld), relu on the way, rounded once
// into each image's rows. Position q = oh * Wp + b * slot + ow is image b's (oh, ow) where
// b < images and ow < OW; the rest are pad columns.
void store_valid(const float* block, int64_t ld, int64_t row, int64_t rows, int64_t col, int64_t cols,
                 const ConvGeometry& g, const WidePlane& p, bool relu, uint16_t* output) {
  const int64_t plane = g.O * g.ohw(), end = col + cols;
  for (int64_t q = col; q < end;) {
    const int64_t oh = q / p.Wp, b = (q - oh * p.Wp) / p.slot, ow = q - oh * p.Wp - b * p.slot;
    if (b >= p.images || ow >= g.OW) {  // pad columns: on to the next image's first
      q = b >= p.images ? (oh + 1) * p.Wp : oh * p.Wp + (b + 1) * p.slot;
      continue;
    }
    const int64_t n = std::min(g.OW - ow, end - q);
    for (int64_t r = 0; r < rows; ++r)
      store_row(block + r * ld + (q - col), output + b * plane + ((row + r) * g.OH + oh) * g.OW + ow, n, relu);
    q += n;
  }
}

void wide_columns_avx512bf16(const bfloat16* x, const bfloat16* w, const float* bias, bfloat16* out,
                             const ConvGeometry& g, bool relu, int64_t batch) {
  const int64_t plane = g.O * g.ohw();
  const auto* input = reinterpret_cast<const uint16_t*>(x);
  parallel_for(0, g.N, batch, [&](int64_t lo, int64_t hi) {
    thread_local ZeroedScratch<uint16_t> scratch;
    thread_local std::vector<int64_t> row_offsets;
    for (int64_t n0 = lo; n0 < hi; n0 += batch) {
      const WidePlane p = wide_plane(g, std::min(hi, n0 + batch) - n0);
      const int64_t columns = g.OH * p.Wp;
      const uint16_t* padded = lay_out_plane(input, g, n0, p, scratch);
      tap_offsets(g, p, row_offsets);
      const MatrixView weight{w, g.O, g.ckk(), g.ckk(), 1};
      const MatrixView taps{padded, g.ckk(), columns, 0, 1, row_offsets.data()};
      // Each block of the product starts from its channels' bias and ends in the output while it
      // is in cache (not a whole part's f32 sums, filled with the bias first and read back after).
      uint16_t* output = reinterpret_cast<uint16_t*>(out) + n0 * plane;
      GemmEpilogue epilogue;
      epilogue.start_block = [&](float* block, int64_t ld, int64_t row, int64_t rows, int64_t, int64_t cols) {
        for (int64_t r = 0; r < rows; ++r) std::fill_n(block + r * ld, cols, bias[row + r]);
      };
      epilogue.finish_block = [&](float* block, int64_t ld, int64_t row, int64_t rows, int64_t col, int64_t cols) {
        store_valid(block, ld, row, rows, col, cols, g, p, relu, output);
      };
      packed_gemm<bfloat16>(weight, taps, nullptr, 0, false, epilogue);
    }
  });
}

// Words 0-15 (half 0) or 16-31 (half 1) of 32 bf16 values as floats: each value's bits become the
// high 16 bits of a float, which is exactly its value.
inline __m512 widened_half(__m512i bits, int half) {
  const __m256i words = half == 0 ? _mm512_castsi512_si256(bits) : _mm512_extracti64x4_epi64(bits, 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(words), 16));
}

// n bf16 values of src to dst where y (bf16) > 0, zeros elsewhere (NaN in y: zero), 32 at a time.
void copy_where_positive(const uint16_t* src, const uint16_t* y, uint16_t* dst, int64_t n) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 32) {
    const __mmask32 m = first_words(n - k);
    const __m512i bits = _mm512_maskz_loadu_epi16(m, y + k);
    const __mmask32 positive = __mmask32(_mm512_cmp_ps_mask(widened_half(bits, 0), zero, _CMP_GT_OQ)) |
                               (__mmask32(_mm512_cmp_ps_mask(widened_half(bits, 1), zero, _CMP_GT_OQ)) << 16);
    _mm512_mask_storeu_epi16(dst + k, m, _mm512_maskz_loadu_epi16(m & positive, src + k));
  }
}

// The sum of n bf16 values (n of any size), widened: f32 vectors of partial sums, then added in double.
double row_sum(const uint16_t* v, int64_t n) {
  __m512 low_sums = _mm512_setzero_ps(), high_sums = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 32) {
    const __m512i bits = _mm512_maskz_loadu_epi16(first_words(n - k), v + k);
    low_sums = _mm512_add_ps(low_sums, widened_half(bits, 0));
    high_sums = _mm512_add_ps(high_sums, widened_half(bits, 1));
  }
  alignas(64) float lanes[32];
  _mm512_store_ps(lanes, low_sums);
  _mm512_store_ps(lanes + 16, high_sums);
  double sum = 0;
  for (float lane : lanes) sum += double(lane);
  return sum;
}

// The products of exact_sums: bf16 bits widened.
inline float widen(uint16_t bits) {
  uint32_t word = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// dW^T's entries of a part on the valid pixels only (im2col's products), for a part whose wide
// sums came out infinite or NaN: slow, and exact about which products count.
void exact_sums(const uint16_t* rows, int64_t pitch, const uint16_t* plane, const std::vector<int64_t>& offsets,
                const ConvGeometry& g, int64_t images, int64_t Wp, int64_t slot, float* out) {
  for (int64_t t = 0; t < g.ckk(); ++t)
    for (int64_t o = 0; o < g.O; ++o) {
      float sum = 0;
      for (int64_t b = 0; b < images; ++b)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t q = oh * Wp + b * slot + ow;
            sum += widen(rows[o * pitch + q]) * widen(plane[offsets[size_t(t)] + q]);
          }
      out[t * g.O + o] = sum;
    }
}

void weight_grad_wide_columns_avx512bf16(const bfloat16* x, const bfloat16* dy, const bfloat16* relu_output,
                                         const ConvGeometry& g, float* dw, float* db) {
  const int64_t plane = g.O * g.ohw(), taps = g.ckk();
  // About 2048 positions per part (2 images of 28x28, 9 of 14x14, up to 32 of 7x7): a deep
  // enough product for the GEMM's tiles, a plane that stays in L2. Parts add their products
  // into their group's sums in order, at most kGroups groups whatever the thread count (one
  // buffer of dW^T per part was 150 MB for a 256-channel 14x14 layer, 2.5x im2col's time), and
  // the groups' sums are added in order at the end: the result does not depend on the threads.
  constexpr int64_t kGroups = 8;
  const int64_t per_part = images_per_part(g, 2048), parts = (g.N + per_part - 1) / per_part;
  const int64_t per_group = (parts + kGroups - 1) / kGroups, groups = (parts + per_group - 1) / per_group;
  // (kept by the calling thread: fresh pages for every backward cost page faults)
  thread_local std::vector<float> group_sums;
  group_sums.resize(size_t(groups * taps * g.O));
  float* const sums = group_sums.data();
  std::vector<double> bias_partial(size_t(parts * g.O), 0.0);
  const auto* input = reinterpret_cast<const uint16_t*>(x);
  const auto* grad = reinterpret_cast<const uint16_t*>(dy);
  const auto* output = reinterpret_cast<const uint16_t*>(relu_output);
  parallel_for(0, groups, 1, [&](int64_t first, int64_t last) {
    thread_local ZeroedScratch<uint16_t> scratch, gradient_rows;
    thread_local std::vector<int64_t> offsets;
    thread_local std::vector<float> exact;
    // Part `part`'s plane and dy rows laid out; their geometry.
    struct Laid {
      WidePlane p;
      int64_t depth, pitch;
      const uint16_t *plane, *rows;
    };
    const auto lay_out = [&](int64_t part) {
      const int64_t n0 = part * per_part;
      const WidePlane p = wide_plane(g, std::min(g.N, n0 + per_part) - n0);
      const int64_t depth = g.OH * p.Wp, pitch = (depth + 31) / 32 * 32;
      const uint16_t* padded = lay_out_plane(input, g, n0, p, scratch);
      // dy in the plane's row pitch (ReLU's mask on the way; NaN in y: 0), zeros between images.
      uint16_t* rows = gradient_rows.prepare(g.O * pitch, {g.O, g.OH, g.OW, p.images, p.Wp, p.slot, pitch});
      for (int64_t b = 0; b < p.images; ++b)
        for (int64_t o = 0; o < g.O; ++o) {
          const int64_t at = (n0 + b) * plane + o * g.ohw();
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            uint16_t* dst = rows + o * pitch + oh * p.Wp + b * p.slot;
            if (output == nullptr) copy_words(grad + at + oh * g.OW, dst, g.OW);
            else copy_where_positive(grad + at + oh * g.OW, output + at + oh * g.OW, dst, g.OW);
          }
        }
      tap_offsets(g, p, offsets);
      return Laid{p, depth, pitch, padded, rows};
    };
    for (int64_t group = first; group < last; ++group) {
      const int64_t begin = group * per_group, end = std::min(parts, begin + per_group);
      float* out = sums + group * taps * g.O;
      for (int64_t part = begin; part < end; ++part) {
        const Laid laid = lay_out(part);
        if (db != nullptr)
          for (int64_t o = 0; o < g.O; ++o)
            bias_partial[size_t(part * g.O + o)] = row_sum(laid.rows + o * laid.pitch, laid.depth);
        if (dw == nullptr) continue;
        const MatrixView tap_rows{laid.plane, taps, laid.depth, 0, 1, offsets.data()};
        const MatrixView gradient_columns{laid.rows, laid.depth, g.O, 1, laid.pitch};  // dy^T
        packed_gemm<bfloat16>(tap_rows, gradient_columns, out, g.O, part > begin);
      }
      if (dw == nullptr || !any_non_finite(out, taps * g.O)) continue;
      // An infinite input met a zero column somewhere in the group: its parts again, exactly.
      std::fill_n(out, taps * g.O, 0.0f);
      exact.resize(size_t(taps * g.O));
      for (int64_t part = begin; part < end; ++part) {
        const Laid laid = lay_out(part);
        exact_sums(laid.rows, laid.pitch, laid.plane, offsets, g, laid.p.images, laid.p.Wp, laid.p.slot, exact.data());
        for (int64_t k = 0; k < taps * g.O; ++k) out[k] += exact[size_t(k)];
      }
    }
  });
  if (dw != nullptr)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t o = 0; o < g.O; ++o) {
        double total = 0;
        for (int64_t group = 0; group < groups; ++group) total += double(sums[(group * taps + t) * g.O + o]);
        dw[o * taps + t] = float(total);
      }
  if (db != nullptr)
    for (int64_t o = 0; o < g.O; ++o) {
      double total = 0;
      for (int64_t part = 0; part < parts; ++part) total += bias_partial[size_t(part * g.O + o)];
      db[o] = float(total);
    }
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

void conv2d_weight_grad_wide_columns(const bfloat16* x, const bfloat16* dy, const bfloat16* relu_output,
                                     const ConvGeometry& g, float* dw, float* db) {
  HG_CHECK(wide_columns_apply(g) && wide_columns_available(),
           "internal error: the wide-columns weight gradient for a convolution or CPU level it does not serve");
#if HG_X86
  weight_grad_wide_columns_avx512bf16(x, dy, relu_output, g, dw, db);
#else
  (void)x, (void)dy, (void)relu_output, (void)dw, (void)db;  // (never reached: not available)
#endif
}

}  // namespace hg::kernels::cpu
