// The wide-rows layout (kernels/cpu/wide_rows.h).
#include "kernels/cpu/wide_rows.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

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
HG_TARGET_END
#endif

}  // namespace

WidePlane wide_plane(const ConvGeometry& g, int64_t images) {
  const int64_t slot = g.W + g.pad;
  return {images, g.H + 2 * g.pad, images * slot + g.pad, slot};
}

int64_t images_per_part(const ConvGeometry& g, int64_t positions) {
  constexpr int64_t kMostImages = 32, kPlaneBytes = 512 * 1024;
  const int64_t slot = g.W + g.pad, per_image_plane = g.C * (g.H + 2 * g.pad) * slot * int64_t(sizeof(float));
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

template <class T>
void lay_out_images(const T* x, const ConvGeometry& g, int64_t n0, const WidePlane& p, float* plane) {
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
        offsets[size_t((c * g.kh + i) * g.kw + j)] = (c * p.Hp + i * g.dilation) * p.Wp + j * g.dilation;
}

float* ZeroedScratch::prepare(int64_t size, const std::vector<int64_t>& for_layout) {
  if (layout != for_layout || values.size() < size_t(size)) {
    if (values.size() < size_t(size)) values.resize(size_t(size));
    std::fill_n(values.data(), size, 0.0f);
    layout = for_layout;
  }
  return values.data();
}

}  // namespace hg::kernels::cpu
