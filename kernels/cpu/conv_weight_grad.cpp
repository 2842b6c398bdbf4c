// The weight gradient on wide rows (kernels/cpu/conv_weight_grad.h): per part of a few images,
// the input laid out as one padded plane per channel and dy in the same row pitch, then
// register-blocked dot products per CPU level (conv_weight_grad_dots.inc), then each entry's
// lanes added up. Parts run in parallel; their sums are added in part order at the end.
#include "kernels/cpu/conv_weight_grad.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/simd_target.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/cpu/wide_rows.h"

#if HG_X86
#include <immintrin.h>
#endif

// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (the unpacks'
// undefined pass-through operand); a known false positive, silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hg::kernels::cpu {

namespace {

// The depth (values of q) each block of dot products runs through before the next block: the
// block's rows of dy (4 x 8 KB) stay in L1 while every block of taps reads them. Parts hold about
// one chunk's depth of images (images_per_part: 2 of 28x28, 9 of 14x14, 32 of 7x7): each part ends
// with the lanes of all its O x C*kh*kw entries added up, about as costly as 4 of the depth loop's
// steps per block -- with one 7x7 image per part (63 positions, 4 steps), as long as the products.
constexpr int64_t kDepthChunk = 2048;
// Depth is padded with zeros to a multiple of the widest vector.
constexpr int64_t kDepthStep = 16;

struct DotProblem {
  const float* dy;  // `rows` rows, `pitch` apart
  int64_t rows, pitch;
  const float* plane;
  const int64_t* offsets;  // per tap: where its row starts in the plane
  int64_t taps;
  int64_t depth;  // a multiple of kDepthStep
};

struct DotKernel {
  int64_t width, rows, taps;  // floats per vector, the register block
  void (*run)(const DotProblem& p, float* lanes, float* out);
};

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace avx512 {
#include "kernels/cpu/wide_rows_avx512.inc"
// 4 x 6 sums in 24 of the 32 registers, 4 + 1 more for the operands: 10 loads per 24 FMAs.
constexpr int kRows = 4, kTaps = 6;
#include "kernels/cpu/conv_weight_grad_dots.inc"
}  // namespace avx512
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace avx2 {
#include "kernels/cpu/wide_rows_avx2.inc"
// 3 x 4 sums in 12 of the 16 registers, 3 + 1 for the operands: 7 loads per 12 FMAs.
constexpr int kRows = 3, kTaps = 4;
#include "kernels/cpu/conv_weight_grad_dots.inc"
}  // namespace avx2
HG_TARGET_END
#endif

// The level's kernel, or none (generic and aarch64: im2col + GEMM there).
const DotKernel* dot_kernel() {
#if HG_X86
  static constexpr DotKernel k512{avx512::kWidth, avx512::kRows, avx512::kTaps, avx512::dot_blocks};
  static constexpr DotKernel k256{avx2::kWidth, avx2::kRows, avx2::kTaps, avx2::dot_blocks};
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return &k512;
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return &k256;
#endif
  return nullptr;
}

template <class V>
void grow(V& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
}


// dW's entries on the valid pixels only, products as im2col's: for a part whose wide dot products
// came out infinite or NaN. (An infinite or NaN input value makes every entry whose rows read it
// non-finite -- times zero, NaN; times anything else, infinite -- and every input value is read,
// so a part with a finite result had only finite inputs, and the zero columns added zeros.)
void exact_dots(const float* dy, int64_t pitch, const float* plane, const std::vector<int64_t>& offsets,
                const ConvGeometry& g, const WidePlane& p, float* out) {
  const int64_t taps = g.ckk();
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < taps; ++t) {
      float sum = 0;
      for (int64_t b = 0; b < p.images; ++b)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t q = oh * p.Wp + b * p.slot + ow;
            sum += dy[o * pitch + q] * plane[offsets[size_t(t)] + q];
          }
      out[o * taps + t] = sum;
    }
}

}  // namespace

bool wide_weight_grad_applies(const ConvGeometry& g) {
  return wide_layout_serves(g) && dot_kernel() != nullptr;
}

template <class T>
void conv2d_weight_grad_wide(const T* x, const T* dy, const T* relu_output, const ConvGeometry& g, float* dw,
                             float* db) {
  const DotKernel* kernel = dot_kernel();
  HG_CHECK(kernel != nullptr && wide_weight_grad_applies(g),
           "internal error: the wide-rows weight gradient for a convolution or CPU level it does not serve");
  const int64_t per_part = images_per_part(g, kDepthChunk);
  const int64_t taps = g.ckk(), parts = (g.N + per_part - 1) / per_part;
  const int64_t row_blocks = (g.O + kernel->rows - 1) / kernel->rows, tap_blocks = (taps + kernel->taps - 1) / kernel->taps;
  std::vector<float> partial(size_t(parts * g.O * taps), 0.0f);
  std::vector<double> bias_partial(size_t(parts * g.O), 0.0);
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    thread_local ZeroedScratch<float> plane, rows;
    thread_local std::vector<float> lanes, line, mask;
    thread_local std::vector<int64_t> offsets;
    for (int64_t part = lo; part < hi; ++part) {
      const int64_t n0 = part * per_part;
      const WidePlane p = wide_plane(g, std::min(g.N, n0 + per_part) - n0);
      const int64_t depth = p.positions(g), pitch = (depth + kDepthStep - 1) / kDepthStep * kDepthStep;
      // The plane, and what the last taps' vectors read past it (dropped products): zeros.
      const int64_t size = p.floats(g) + g.dilation * (g.kw - 1) + (pitch - depth) + kDepthStep;
      float* values = plane.prepare(size, {g.C, g.H, g.W, g.pad, g.stride, p.images, size});
      lay_out_images(x, g, n0, p, values);
      // dy in the plane's row pitch (ReLU's mask on the way), zeros between the images' columns.
      float* dy_rows = rows.prepare(g.O * pitch, {g.O, g.OH, g.OW, p.images, p.Wp, p.slot, pitch});
      for (int64_t b = 0; b < p.images; ++b)
        for (int64_t o = 0; o < g.O; ++o) {
          const int64_t at = ((n0 + b) * g.O + o) * g.ohw();
          float* dst = dy_rows + o * pitch + b * p.slot;
          if (relu_output == nullptr) {
            if constexpr (std::is_same_v<T, float>) {
              copy_rows(dy + at, g.OW, dst, p.Wp, g.OH, g.OW);
            } else {
              for (int64_t oh = 0; oh < g.OH; ++oh) convert_to_float(dy + at + oh * g.OW, dst + oh * p.Wp, size_t(g.OW));
            }
            continue;
          }
          const float *gradient = nullptr, *y = nullptr;
          if constexpr (std::is_same_v<T, float>) {
            gradient = dy + at, y = relu_output + at;
          } else {
            grow(line, g.ohw());
            grow(mask, g.ohw());
            gradient = line.data(), y = mask.data();
            convert_to_float(dy + at, line.data(), size_t(g.ohw()));
            convert_to_float(relu_output + at, mask.data(), size_t(g.ohw()));
          }
          for (int64_t oh = 0; oh < g.OH; ++oh)
            for (int64_t k = 0; k < g.OW; ++k)  // (NaN in y: 0)
              dst[oh * p.Wp + k] = y[oh * g.OW + k] > 0.0f ? gradient[oh * g.OW + k] : 0.0f;
        }
      if (db)
        for (int64_t o = 0; o < g.O; ++o) bias_partial[size_t(part * g.O + o)] = sum_as_double(dy_rows + o * pitch, depth);
      if (!dw) continue;
      tap_offsets(g, p, offsets);
      float* out = partial.data() + part * g.O * taps;
      if (pitch > kDepthChunk) grow(lanes, row_blocks * tap_blocks * kernel->rows * kernel->taps * kernel->width);
      kernel->run({dy_rows, g.O, pitch, values, offsets.data(), taps, pitch}, lanes.data(), out);
      if (any_non_finite(out, g.O * taps)) exact_dots(dy_rows, pitch, values, offsets, g, p, out);
    }
  });
  if (dw)
    for (int64_t k = 0; k < g.O * taps; ++k) {
      double total = 0;
      for (int64_t part = 0; part < parts; ++part) total += double(partial[size_t(part * g.O * taps + k)]);
      dw[k] = float(total);
    }
  if (db)
    for (int64_t o = 0; o < g.O; ++o) {
      double total = 0;
      for (int64_t part = 0; part < parts; ++part) total += bias_partial[size_t(part * g.O + o)];
      db[o] = float(total);
    }
}

template void conv2d_weight_grad_wide<float>(const float*, const float*, const float*, const ConvGeometry&, float*, float*);
template void conv2d_weight_grad_wide<half>(const half*, const half*, const half*, const ConvGeometry&, float*, float*);
template void conv2d_weight_grad_wide<bfloat16>(const bfloat16*, const bfloat16*, const bfloat16*, const ConvGeometry&,
                                                float*, float*);

}  // namespace hg::kernels::cpu
