// The wide-rows layout (kernels/cpu/wide_rows.h).
#include "kernels/cpu/wide_rows.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/simd_target.h"

#if HG_X86
#include <immintrin.h>
#endif

// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (masked loads);
// a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hg::kernels::cpu {

namespace {

void copy_rows_portable(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch, int64_t rows, int64_t n) {
  for (int64_t row = 0; row < rows; ++row) std::copy_n(src + row * src_pitch, n, dst + row * dst_pitch);
}

// src[0], src[2], ... to evens and src[1], src[3], ... to odds, from `k` on (n values in all).
void deinterleave_portable(const float* src, int64_t n, float* evens, float* odds, int64_t k = 0) {
  for (; k + 1 < n; k += 2) {
    evens[k / 2] = src[k];
    odds[k / 2] = src[k + 1];
  }
  if (k < n) evens[k / 2] = src[k];
}

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512_FEATURES)
void copy_rows_avx512(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch, int64_t rows, int64_t n) {
  for (int64_t row = 0; row < rows; ++row, src += src_pitch, dst += dst_pitch)
    for (int64_t k = 0; k < n; k += 16) {
      const __mmask16 m = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
      _mm512_mask_storeu_ps(dst + k, m, _mm512_maskz_loadu_ps(m, src + k));
    }
}
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX2_FEATURES)
void copy_rows_avx2(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch, int64_t rows, int64_t n) {
  for (int64_t row = 0; row < rows; ++row, src += src_pitch, dst += dst_pitch) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, _mm256_loadu_ps(src + k));
    for (; k < n; ++k) dst[k] = src[k];
  }
}

// 16 values at a time: two vectors' shuffles pick each half's evens (odds), a lane permute puts
// them in order.
void deinterleave_avx2(const float* src, int64_t n, float* evens, float* odds) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256 a = _mm256_loadu_ps(src + k), b = _mm256_loadu_ps(src + k + 8);
    const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(evens + k / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(odds + k / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  deinterleave_portable(src, n, evens, odds, k);
}
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512_FEATURES)
// 32 values at a time (the last with masks): one two-vector permute for the evens, one for the odds.
void deinterleave_avx512(const float* src, int64_t n, float* evens, float* odds) {
  const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  for (int64_t k = 0; k < n; k += 32) {
    const int64_t left = n - k;
    const auto mask = [](int64_t count) {
      return count >= 16 ? __mmask16(0xFFFF) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
    };
    const __m512 a = _mm512_maskz_loadu_ps(mask(left), src + k), b = _mm512_maskz_loadu_ps(mask(left - 16), src + k + 16);
    _mm512_mask_storeu_ps(evens + k / 2, mask((left + 1) / 2), _mm512_permutex2var_ps(a, even_index, b));
    _mm512_mask_storeu_ps(odds + k / 2, mask(left / 2), _mm512_permutex2var_ps(a, odd_index, b));
  }
}
HG_TARGET_END
#endif

}  // namespace

WidePlane wide_plane(const ConvGeometry& g, int64_t images) {
  if (g.stride == 2) {  // (nothing shared between neighbours: each slot holds its image's padding)
    const int64_t slot = (g.W + 2 * g.pad + 1) / 2;
    return {images, (g.H + 2 * g.pad + 1) / 2, images * slot, slot, 4};
  }
  const int64_t slot = g.W + g.pad;
  return {images, g.H + 2 * g.pad, images * slot + g.pad, slot, 1};
}

bool wide_layout_serves(const ConvGeometry& g) {
  if (g.groups != 1 || g.pad < 0) return false;
  if (g.stride == 2) return g.dilation == 1;
  return g.stride == 1 && g.pad <= g.dilation * (g.kw - 1);
}

int64_t images_per_part(const ConvGeometry& g, int64_t positions) {
  constexpr int64_t kMostImages = 32, kPlaneBytes = 512 * 1024;
  const WidePlane one = wide_plane(g, 1);
  const int64_t slot = one.slot, per_image_plane = g.C * one.phases * one.Hp * slot * int64_t(sizeof(float));
  const int64_t by_positions = positions / std::max<int64_t>(g.OH * slot, 1);
  const int64_t by_plane = kPlaneBytes / std::max<int64_t>(per_image_plane, 1);
  return std::max<int64_t>(1, std::min({by_positions, by_plane, kMostImages}));
}

void copy_rows(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch, int64_t rows, int64_t n) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return copy_rows_avx512(src, src_pitch, dst, dst_pitch, rows, n);
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return copy_rows_avx2(src, src_pitch, dst, dst_pitch, rows, n);
#endif
  copy_rows_portable(src, src_pitch, dst, dst_pitch, rows, n);
}

void deinterleave(const float* src, int64_t n, float* evens, float* odds) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return deinterleave_avx512(src, n, evens, odds);
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return deinterleave_avx2(src, n, evens, odds);
#endif
  deinterleave_portable(src, n, evens, odds);
}

namespace {

// One input row (W values, float) into its two phase rows of a stride-2 plane: padded column
// wp = w + pad goes to the row of parity wp % 2, at column wp / 2. (src[2k] lands at column
// k + pad / 2 of parity pad % 2; src[2k + 1] at k + (pad + 1) / 2 of the other.)
void split_row(const float* src, int64_t W, int64_t pad, float* even_columns, float* odd_columns) {
  float* const rows[2] = {even_columns, odd_columns};
  deinterleave(src, W, rows[pad & 1] + (pad >> 1), rows[(pad + 1) & 1] + ((pad + 1) >> 1));
}

}  // namespace

template <class T>
void lay_out_images(const T* x, const ConvGeometry& g, int64_t n0, const WidePlane& p, float* plane) {
  if (p.phases == 4) {  // each row split into its phase rows (16-bit rows widened first)
    thread_local std::vector<float> widened;
    if (widened.size() < size_t(g.W)) widened.resize(size_t(g.W));
    for (int64_t b = 0; b < p.images; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h) {
          const T* src = x + (((n0 + b) * g.C + c) * g.H + h) * g.W;
          const float* row = nullptr;
          if constexpr (std::is_same_v<T, float>) {
            row = src;
          } else {
            convert_to_float(src, widened.data(), size_t(g.W));
            row = widened.data();
          }
          const int64_t hp = h + g.pad;  // phase rows (hp % 2, column parity) of channel c
          float* even = plane + ((c * 4 + (hp & 1) * 2) * p.Hp + (hp >> 1)) * p.Wp + b * p.slot;
          split_row(row, g.W, g.pad, even, even + p.Hp * p.Wp);
        }
    return;
  }
  for (int64_t b = 0; b < p.images; ++b)
    for (int64_t c = 0; c < g.C; ++c) {
      const T* src = x + ((n0 + b) * g.C + c) * g.H * g.W;
      float* dst = plane + (c * p.Hp + g.pad) * p.Wp + g.pad + b * p.slot;
      if constexpr (std::is_same_v<T, float>) {
        copy_rows(src, g.W, dst, p.Wp, g.H, g.W);
      } else {
        for (int64_t h = 0; h < g.H; ++h) convert_to_float(src + h * g.W, dst + h * p.Wp, size_t(g.W));
      }
    }
}

template void lay_out_images<float>(const float*, const ConvGeometry&, int64_t, const WidePlane&, float*);
template void lay_out_images<half>(const half*, const ConvGeometry&, int64_t, const WidePlane&, float*);
template void lay_out_images<bfloat16>(const bfloat16*, const ConvGeometry&, int64_t, const WidePlane&, float*);

void tap_offsets(const ConvGeometry& g, const WidePlane& p, std::vector<int64_t>& offsets) {
  offsets.resize(size_t(g.ckk()));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j)
        offsets[size_t((c * g.kh + i) * g.kw + j)] =
            p.phases == 4 ? ((c * 4 + (i & 1) * 2 + (j & 1)) * p.Hp + (i >> 1)) * p.Wp + (j >> 1)
                          : (c * p.Hp + i * g.dilation) * p.Wp + j * g.dilation;
}

bool any_non_finite(const float* v, int64_t n) {
  uint32_t found = 0;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, v + k, sizeof bits);
    found |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  return found != 0;
}

}  // namespace hg::kernels::cpu
