// The conv2d kernels. On the CPU: im2col + GEMM, one image per task. im2col lays the receptive
// field of every output pixel out as a column, so the convolution of one image is a single GEMM:
//
//   out_n (O, OH*OW) = W (O, C*kh*kw) @ cols_n (C*kh*kw, OH*OW)   (+ bias per row)
//
// One image's columns (a few hundred KB at most for hg-train's CNN) stay in L2 while the GEMM
// reads them, and the result is written straight into the output tensor.
// Backward: dcols = W^T @ g_n, scattered back to the image (col2im), or, for bf16 3x3 stride-1
// layers, the convolution of g with the flipped weight (input_grad_as_convolution, no col2im);
// dW = sum_n g_n @ cols_n^T, a few small images per GEMM, recomputing cols_n instead of saving it
// (memory); db = sum of g over n, h, w. 16-bit tensors
// are widened to f32 as they are laid out, so the GEMM always runs in f32 (or natively in bf16
// where the CPU has AVX512-BF16). Grouped convolutions run one such GEMM per group; depthwise ones
// (one input channel per group) have their own direct loops (kernels/cpu/depthwise_conv.h). Stride-1
// convolutions with f32 operands run at the AVX2 and AVX-512 levels as direct convolutions on wide
// rows, forward and input gradient (kernels/cpu/conv_wide_rows.h; use_wide_rows says where), with
// their weight gradient as dot products on the same rows (kernels/cpu/conv_weight_grad.h); 3x3
// stride-1 ones with enough channels elsewhere as Winograd F(2x2, 3x3) (kernels/cpu/winograd_conv.h;
// use_winograd); stride-1 bf16 ones on CPUs with native bf16 products skip im2col
// (kernels/cpu/conv_wide_columns.h). On a GPU: cuDNN (kernels/cuda/conv.cpp).
#include "kernels/conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/copy.h"
#include "core/cpu_features.h"
#include "core/parallel.h"
#include "core/simd_target.h"
#include "kernels/cpu/col2im.h"
#include "kernels/cpu/conv_weight_grad.h"
#include "kernels/cpu/conv_wide_rows.h"
#include "kernels/cpu/conv_wide_columns.h"
#include "kernels/cpu/depthwise_conv.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/wide_rows.h"
#include "kernels/cpu/winograd_conv.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/activation.h"
#include "kernels/relu_bits.h"

namespace hg::kernels {

namespace {

using kernels::sum_as_double;

// Images per partial sum of dW and db: fixed, so the result does not depend on the thread count.
constexpr int64_t kImagesPerPartial = 8;
// The output pixels one GEMM should cover at least: the forward (as the GEMM's columns) and the
// weight gradient (as its depth) put the images of small maps side by side up to this.
constexpr int64_t kBatchPixels = 512;

// ---- geometry ------------------------------------------------------------------------------------

// Division rounding down / up (C++ rounds toward zero, wrong for negative numerators).
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// The output columns ow whose input column iw = ow*stride - pad + j*dilation lies inside the
// image, for kernel column j: [begin, end). The rest read the zero padding.
struct ValidColumns {
  int64_t begin, end;
};
ValidColumns valid_columns(const ConvGeometry& g, int64_t j) {
  const int64_t offset = g.pad - j * g.dilation;
  const int64_t begin = std::clamp<int64_t>(ceil_div(offset, g.stride), 0, g.OW);
  const int64_t end = std::clamp<int64_t>(floor_div(g.W - 1 + offset, g.stride) + 1, begin, g.OW);
  return {begin, end};
}

// Calls f(c, i, j, tap) for every row of the column matrix: input channel c and kernel tap
// (i, j), the row's index `tap`.
template <class F>
void for_each_tap(const ConvGeometry& g, F&& f) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) f(c, i, j, (c * g.kh + i) * g.kw + j);
}

// ---- stride-1 layout kernels ---------------------------------------------------------------------
//
// With stride 1, the im2col row of tap (i, j) at output row oh is the zero-padded input row
// oh + i*dilation read from column j*dilation on: a plain copy once the image is padded. Each run is copied in
// whole 64-byte blocks (16 or 32 where the run fits; no masks or scalar edges); a block's excess
// lands in the next run, which is written after it, or in the slack at the end of the buffers.
// col2im with stride 1 is a SIMD kernel per CPU level (kernels/cpu/col2im.h).

constexpr int64_t kCopyBlock = 64;  // bytes

// Extra elements after an im2col buffer for the block copies.
template <class S>
constexpr int64_t kColumnSlack = kCopyBlock / int64_t(sizeof(S));

// One block of Bytes (16, 32 or 64), moved as 16- or 32-byte vector values: one AVX register
// each where the caller is compiled for AVX2, SSE moves otherwise. (A plain 64-byte memcpy is
// expanded in 16-byte moves at every level, and GCC 12 moves one 64-byte value through the stack
// at AVX2.) The memcpy calls into and out of the vector values are how C++ spells an unaligned
// load and store; they compile to single moves.
using Vector16 = char __attribute__((vector_size(16)));
using Vector32 = char __attribute__((vector_size(32)));

template <int64_t Bytes>
[[gnu::always_inline]] inline void copy_block(const void* src, void* dst) {
  using Part = std::conditional_t<(Bytes < 32), Vector16, Vector32>;  // (vector_size of a dependent size is ignored)
  constexpr int64_t kPart = sizeof(Part);
  Part parts[Bytes / kPart];
  for (int64_t k = 0; k < Bytes / kPart; ++k) std::memcpy(&parts[k], static_cast<const char*>(src) + k * kPart, kPart);
  for (int64_t k = 0; k < Bytes / kPart; ++k) std::memcpy(static_cast<char*>(dst) + k * kPart, &parts[k], kPart);
}

// Every run of the padded image (C, Hp, Wp) into the column matrix, in whole blocks of Bytes.
// NOTE: the tap loops are written out rather than through for_each_tap: GCC does not inline that
// template into the AVX2 wrapper below, and its copies would then stay SSE2.
template <int64_t Bytes, class S>
[[gnu::always_inline]] inline void copy_runs(const S* padded, const ConvGeometry& g, S* cols, int64_t pitch) {
  const int64_t Hp = g.H + 2 * g.pad, Wp = g.W + 2 * g.pad, block = Bytes / int64_t(sizeof(S));
  const int64_t blocks = (g.OW + block - 1) / block;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const S* src = padded + (c * Hp + i * g.dilation) * Wp + j * g.dilation;
        S* dst = cols + ((c * g.kh + i) * g.kw + j) * pitch;
        for (int64_t oh = 0; oh < g.OH; ++oh, src += Wp, dst += g.OW)
          for (int64_t b = 0; b < blocks; ++b) copy_block<Bytes>(src + b * block, dst + b * block);
      }
}

// The same compiled for AVX2 (and used on the AVX-512 levels too): copy_runs is inlined into it,
// and each 64-byte block becomes two AVX moves instead of four SSE2 ones -- the portable build's
// copies took twice as long (11% of a CNN training step against 5.5%). Reached only through the
// CPU level in use.
#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)
template <int64_t Bytes, class S>
void copy_runs_avx2(const S* padded, const ConvGeometry& g, S* cols, int64_t pitch) {
  copy_runs<Bytes>(padded, g, cols, pitch);
}
HG_TARGET_END
#endif

// Runs of at most 16 or 32 bytes (7x7 and 14x14 maps of bf16, 7x7 of f32) are copied as one
// block of that size: a 64-byte block stored 4.6x the bytes of a 7-value bf16 run, and the stores
// bound the copy (bf16, batch 128: 2-7% off the forward and gradients of ResNet-20's 32x14x14 and
// 64x7x7 layers).
template <int64_t Bytes, class S>
void copy_runs_at_level(const S* padded, const ConvGeometry& g, S* cols, int64_t pitch) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return copy_runs_avx2<Bytes>(padded, g, cols, pitch);
#endif
  copy_runs<Bytes>(padded, g, cols, pitch);
}

template <class S>
void copy_all_runs(const S* padded, const ConvGeometry& g, S* cols, int64_t pitch) {
  const int64_t run = g.OW * int64_t(sizeof(S));
  if (run <= 16) return copy_runs_at_level<16>(padded, g, cols, pitch);
  if (run <= 32) return copy_runs_at_level<32>(padded, g, cols, pitch);
  copy_runs_at_level<kCopyBlock>(padded, g, cols, pitch);
}

// The padded image holds the column type S: 16-bit inputs are widened once per image here.
template <class T, class S>
void im2col_stride1(const T* x, const ConvGeometry& g, S* cols, int64_t pitch, std::vector<S>& padded) {
  const int64_t Hp = g.H + 2 * g.pad, Wp = g.W + 2 * g.pad;
  padded.assign(static_cast<size_t>(g.C * Hp * Wp + kColumnSlack<S>), S(0));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t h = 0; h < g.H; ++h) {
      const T* src = x + (c * g.H + h) * g.W;
      S* dst = padded.data() + (c * Hp + h + g.pad) * Wp + g.pad;
      if constexpr (std::is_same_v<T, S>) std::copy_n(src, g.W, dst);
      else convert_to_float(src, dst, size_t(g.W));
    }
  copy_all_runs(padded.data(), g, cols, pitch);
}


// ---- im2col and col2im --------------------------------------------------------------------------

// Image x (C, H, W) -> columns (C*kh*kw rows, OH*OW columns) at `cols`, rows `pitch` apart
// (g is one group's geometry);
// `cols` has kColumnSlack<S> elements to spare at its end, `padded` is scratch.
template <class T, class S>
void im2col(const T* x, const ConvGeometry& g, S* cols, int64_t pitch, std::vector<S>& padded) {
  if (g.stride == 1) return im2col_stride1(x, g, cols, pitch, padded);
  for_each_tap(g, [&](int64_t c, int64_t i, int64_t j, int64_t tap) {
    S* row = cols + tap * pitch;
    const auto [ow_begin, ow_end] = valid_columns(g, j);
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      S* dst = row + oh * g.OW;
      const int64_t ih = oh * g.stride - g.pad + i * g.dilation;
      if (ih < 0 || ih >= g.H) {
        for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow] = S(0);
        continue;
      }
      const T* src = x + (c * g.H + ih) * g.W + (ow_begin * g.stride - g.pad + j * g.dilation);
      for (int64_t ow = 0; ow < ow_begin; ++ow) dst[ow] = S(0);
      if constexpr (std::is_same_v<T, S>) {  // (bf16 columns of bf16 data: a copy, not a round trip through f32)
        for (int64_t ow = ow_begin; ow < ow_end; ++ow) dst[ow] = src[(ow - ow_begin) * g.stride];
      } else {
        for (int64_t ow = ow_begin; ow < ow_end; ++ow) dst[ow] = S(Acc<T>(src[(ow - ow_begin) * g.stride]));
      }
      for (int64_t ow = ow_end; ow < g.OW; ++ow) dst[ow] = S(0);
    }
  });
}

// The inverse: image (C, H, W) = the sum of every column entry over the pixel it was read from.
template <class S>
void col2im(const S* cols, int64_t pitch, const ConvGeometry& g, S* image) {
  if constexpr (std::is_same_v<S, float>) {
    if (g.stride == 1 && g.dilation == 1)
      return cpu::col2im_stride1(cols, pitch, {g.C, g.H, g.W, g.kh, g.kw, g.pad, g.OH, g.OW}, image);
  }
  std::fill(image, image + g.C * g.H * g.W, S(0));
  for_each_tap(g, [&](int64_t c, int64_t i, int64_t j, int64_t tap) {
    const S* row = cols + tap * pitch;
    const auto [ow_begin, ow_end] = valid_columns(g, j);
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t ih = oh * g.stride - g.pad + i * g.dilation;
      if (ih < 0 || ih >= g.H) continue;
      S* dst = image + (c * g.H + ih) * g.W + (ow_begin * g.stride - g.pad + j * g.dilation);
      const S* src = row + oh * g.OW + ow_begin;
      for (int64_t k = 0; k < ow_end - ow_begin; ++k) dst[k * g.stride] += src[k];
    }
  });
}

// relu's derivative applied to a gradient: out = g where y > 0, else 0 (NaN in y gives 0).
// Branch-free: y's sign is random, and a branch per element would mispredict half the time.
// NOTE: g is read unconditionally, before the select. Written as `y > 0 ? g[k] : 0` the load is
// conditional, which the compiler may not hoist: without AVX2's masked loads (the portable
// build) the loop then stayed scalar with a branch per element -- 14% of a CNN training step.
// 16-bit gradients are selected as raw bits (the struct types would not vectorise).
template <class T, class P>
void pass_where_positive(const T* y, const P* g, int64_t n, P* out) {  // out may be g
  alignas(64) Acc<T> y_chunk[kernels::kChunk];
  for (int64_t j = 0; j < n; j += kernels::kChunk) {
    const int64_t m = std::min(kernels::kChunk, n - j);
    const Acc<T>* yv = kernels::load_chunk<T>(reinterpret_cast<const char*>(y + j), sizeof(T), m, y_chunk);
    if constexpr (sizeof(P) == 2) {
      const auto* g_bits = reinterpret_cast<const uint16_t*>(g + j);
      auto* out_bits = reinterpret_cast<uint16_t*>(out + j);
      for (int64_t k = 0; k < m; ++k) {
        const uint16_t bits = g_bits[k];
        out_bits[k] = yv[k] > Acc<T>(0) ? bits : uint16_t(0);
      }
    } else {
      for (int64_t k = 0; k < m; ++k) {
        const P value = g[j + k];
        out[j + k] = yv[k] > Acc<T>(0) ? value : P(0);
      }
    }
  }
}

template <class T>
void store(const Acc<T>* values, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, Acc<T>>) std::copy(values, values + n, out);
  else convert_from_float(values, out, size_t(n));
}

cpu::MatrixView dense(const void* data, int64_t rows, int64_t cols) { return {data, rows, cols, cols, 1}; }
cpu::MatrixView dense_transposed(const void* data, int64_t rows, int64_t cols) {  // of a (cols, rows) matrix
  return {data, rows, cols, 1, rows};
}

// Grows a per-thread scratch buffer to at least n elements (never shrinks or re-zeroes it).
template <class V>
void grow(V& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
}

// ---- the GEMM operand type ---------------------------------------------------------------------

// GEMM operands are laid out in a panel type P: bf16 stays bf16 on CPUs with AVX512-BF16 (the
// GEMM multiplies bf16 pairs natively, accumulating in f32, at twice the f32 rate); every other
// dtype is widened to its compute type. Results (S = Acc<T>) are always f32 or f64.
template <class T, class P>
const P* as_panel(const T* data, int64_t n, std::vector<P>& panel) {
  if constexpr (std::is_same_v<T, P>) {
    return data;
  } else {
    panel.resize(size_t(n));
    convert_to_float(data, panel.data(), size_t(n));
    return panel.data();
  }
}

template <class P, class S>
void panel_gemm(const cpu::MatrixView& a, const cpu::MatrixView& b, S* c, bool accumulate) {
  if constexpr (std::is_same_v<P, bfloat16>) cpu::packed_gemm<bfloat16>(a, b, c, b.cols, accumulate);
  else cpu::gemm_dense<S>(a, b, c, accumulate);
}

// ---- forward ------------------------------------------------------------------------------------

// wide: the stride-1 and stride-2 bf16 GEMMs on wide columns (kernels/cpu/conv_wide_columns.h)
// where they apply.
template <class T, class P>
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g, bool relu,
                  bool wide = false) {
  using S = Acc<T>;
  std::vector<P> w_panel;
  const P* weight = as_panel<T, P>(w.data_ptr<T>(), g.O * g.ckk(), w_panel);
  const std::vector<S> bias = bias_values<S>(b, g.O);
  if constexpr (std::is_same_v<P, bfloat16>) {
    if (wide && cpu::wide_columns_apply(g)) {  // images side by side as below, read without im2col
      const int64_t images = std::clamp<int64_t>(kBatchPixels / g.ohw(), 1, kImagesPerPartial);
      return cpu::conv2d_wide_columns(x.data_ptr<bfloat16>(), weight, bias.data(), out.data_ptr<bfloat16>(), g, relu,
                                      images);
    }
  }
  const T* input = x.data_ptr<T>();
  T* output = out.data_ptr<T>();
  const int64_t image = g.C * g.H * g.W, plane = g.O * g.ohw();
  // Group k: its input slice, weight rows and output rows, each a fixed stride from group 0's.
  const ConvGeometry one = g.one_group();
  const int64_t group_image = one.C * g.H * g.W, group_plane = one.O * g.ohw(), group_weight = one.O * g.ckk();
  // A 1x1 convolution with stride 1 and no padding: the image already is its column matrix.
  const bool identity_columns = std::is_same_v<T, P> && g.kh == 1 && g.kw == 1 && g.stride == 1 && g.pad == 0;
  // Small maps (one group): `batch` images side by side, one GEMM of batch * OH*OW columns whose
  // rows are then stored to each image -- a 7x7 map's 49 columns fill 2 of the GEMM's 32-column
  // panels by three quarters, and each image's GEMM packed the whole weight again.
  const int64_t batch = g.groups == 1 && !identity_columns ? std::clamp<int64_t>(kBatchPixels / g.ohw(), 1, kImagesPerPartial) : 1;
  if (batch > 1) {
    const int64_t pitch = batch * g.ohw() + kColumnSlack<P>;
    parallel_for(0, g.N, batch, [&](int64_t lo, int64_t hi) {
      thread_local std::vector<P> cols, padded;
      thread_local std::vector<S> result;
      grow(cols, g.ckk() * pitch);
      grow(result, g.O * batch * g.ohw());
      for (int64_t n0 = lo; n0 < hi; n0 += batch) {
        const int64_t n1 = std::min(hi, n0 + batch), columns = (n1 - n0) * g.ohw();
        for (int64_t n = n0; n < n1; ++n) im2col(input + n * image, g, cols.data() + (n - n0) * g.ohw(), pitch, padded);
        S* dst = result.data();  // (O, columns)
        for (int64_t o = 0; o < g.O; ++o) std::fill_n(dst + o * columns, columns, bias[size_t(o)]);
        panel_gemm<P, S>(dense(weight, g.O, g.ckk()), {cols.data(), g.ckk(), columns, pitch, 1}, dst, true);
        if (relu)  // (NaN stays NaN, like relu)
          for (int64_t k = 0; k < g.O * columns; ++k) dst[k] = dst[k] < S(0) ? S(0) : dst[k];
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t o = 0; o < g.O; ++o) store<T>(dst + o * columns + (n - n0) * g.ohw(), g.ohw(), output + n * plane + o * g.ohw());
      }
    });
    return;
  }
  parallel_for(0, g.N, 1, [&](int64_t lo, int64_t hi) {
    // Per-thread scratch, kept between calls: im2col writes every element it uses, so growing
    // it is all that is needed (zero-filling half a megabyte per task cost more than the copy).
    thread_local std::vector<P> cols, padded;
    thread_local std::vector<S> result;
    if (!identity_columns) grow(cols, g.ckk() * g.ohw() + kColumnSlack<P>);
    if (!std::is_same_v<T, S>) grow(result, plane);
    for (int64_t n = lo; n < hi; ++n) {
      S* dst = std::is_same_v<T, S> ? reinterpret_cast<S*>(output + n * plane) : result.data();
      for (int64_t o = 0; o < g.O; ++o) std::fill_n(dst + o * g.ohw(), g.ohw(), bias[size_t(o)]);
      for (int64_t k = 0; k < g.groups; ++k) {
        const T* group_input = input + n * image + k * group_image;
        const P* columns = nullptr;
        if constexpr (std::is_same_v<T, P>) {
          if (identity_columns) columns = group_input;
        }
        if (columns == nullptr) {
          im2col(group_input, one, cols.data(), g.ohw(), padded);
          columns = cols.data();
        }
        panel_gemm<P, S>(dense(weight + k * group_weight, one.O, g.ckk()), dense(columns, g.ckk(), g.ohw()),
                         dst + k * group_plane, true);
      }
      if (relu)  // fused: the image's output is still in cache (NaN stays NaN, like relu)
        for (int64_t k = 0; k < plane; ++k) dst[k] = dst[k] < S(0) ? S(0) : dst[k];
      if constexpr (!std::is_same_v<T, S>) store<T>(result.data(), plane, output + n * plane);
    }
  });
}

// ---- backward -----------------------------------------------------------------------------------

// relu_output: with the ReLU epilogue, the forward's output y; the incoming gradient passes only where
// y > 0 (relu's derivative), applied while each image's gradient is gathered.
template <class T, class P>
void conv_backward(const Tensor& x, const Tensor& w, const Tensor& grad, const T* relu_output, const ConvGeometry& g,
                   Tensor* gx, Tensor* gw, Tensor* gb) {
  using S = Acc<T>;
  const T* input = x.data_ptr<T>();
  const T* dy = grad.data_ptr<T>();
  const int64_t image = g.C * g.H * g.W, plane = g.O * g.ohw(), wsize = g.O * g.ckk();
  const ConvGeometry one = g.one_group();
  const int64_t group_image = one.C * g.H * g.W, group_plane = one.O * g.ohw(), group_weight = one.O * g.ckk();
  std::vector<P> w_panel;
  const P* weight = gx ? as_panel<T, P>(w.data_ptr<T>(), wsize, w_panel) : nullptr;
  const int64_t parts = (g.N + kImagesPerPartial - 1) / kImagesPerPartial;
  // dW is (O, ckk); when its transpose fills the GEMM's register tiles better (conv1 of
  // hg-train's CNN: 16 x 9 wastes most of a 12 x 32 tile, 9 x 16 half as much), the partial sums
  // are computed as dW^T and transposed once at the end (one group only: a group's dW^T would not
  // be a dense block of the whole).
  const bool dw_transposed = g.groups == 1 && cpu::prefer_transposed_product(g.O, g.ckk());
  // The partial sums of dW, part after part, in a buffer the calling thread keeps: fresh pages
  // for every backward (2.4 MB for a 64-channel 3x3 layer at batch 128) were a fifth of its time,
  // page faults and all (64x7x7 bf16: 4.9 -> 3.7 ms; f32 7.5 -> 6.2 ms).
  // NOTE: the tasks reach it through `partials`: the name weight_partials inside them would be
  // each worker thread's own buffer.
  thread_local std::vector<S> weight_partials;
  if (gw) weight_partials.assign(static_cast<size_t>(parts * wsize), S(0));
  S* const partials = weight_partials.data();
  std::vector<std::vector<double>> bias_partial(gb ? static_cast<size_t>(parts) : 0, std::vector<double>(size_t(g.O), 0.0));
  // dW sums over the images' pixels: `batch` images side by side make one GEMM of depth
  // batch * OH * OW (at least kBatchPixels where a part has the images), instead of one per
  // image -- a 7x7 map's 49 is too shallow for the GEMM to amortise loading and storing dW's tiles
  // (ResNet-20's 64x7x7 layer, bf16, batch 128: 5.6 -> 4.9 ms; 28x28 maps stay one image per GEMM).
  const int64_t batch = std::clamp<int64_t>(kBatchPixels / g.ohw(), 1, kImagesPerPartial);
  const int64_t pitch = batch * g.ohw() + kColumnSlack<P>;  // a row of the batch's columns
  parallel_chunks(g.N, kImagesPerPartial, [&](int64_t part, int64_t lo, int64_t hi) {
    thread_local std::vector<P> cols, padded, g_panel, g_batch;
    thread_local std::vector<S> dcols, dimage;
    if (gw) grow(cols, g.ckk() * pitch);
    if (gw && batch > 1) grow(g_batch, g.O * batch * g.ohw());
    if (gx) grow(dcols, g.ckk() * g.ohw());
    if (gx && !std::is_same_v<T, S>) grow(dimage, image);
    const auto input_grad_gemm = [&](const P* g_n, int64_t n) {  // image n's dx: dcols = W^T @ g_n, col2im
      for (int64_t k = 0; k < g.groups; ++k) {
        const P* g_k = g_n + k * group_plane;
        panel_gemm<P, S>(dense_transposed(weight + k * group_weight, g.ckk(), one.O), dense(g_k, one.O, g.ohw()),
                         dcols.data(), false);
        if constexpr (std::is_same_v<T, S>) {
          col2im(dcols.data(), g.ohw(), one, gx->data_ptr<T>() + n * image + k * group_image);  // straight in
        } else {
          col2im(dcols.data(), g.ohw(), one, dimage.data() + k * group_image);
        }
      }
      if constexpr (!std::is_same_v<T, S>) store<T>(dimage.data(), image, gx->data_ptr<T>() + n * image);
    };
    for (int64_t n0 = lo; n0 < hi; n0 += batch) {
      const int64_t n1 = std::min(hi, n0 + batch), columns = (n1 - n0) * g.ohw();
      // The batch's gradient (O, columns), image n's at column (n - n0) * OH*OW: g_n itself for one image.
      const P* g_rows = nullptr;
      for (int64_t n = n0; n < n1; ++n) {
        const P* g_n = as_panel<T, P>(dy + n * plane, plane, g_panel);  // (O, OH*OW)
        if (relu_output != nullptr) {
          g_panel.resize(size_t(plane));
          pass_where_positive(relu_output + n * plane, g_n, plane, g_panel.data());
          g_n = g_panel.data();
        }
        if (gb)
          for (int64_t o = 0; o < g.O; ++o) bias_partial[size_t(part)][size_t(o)] += sum_as_double(g_n + o * g.ohw(), g.ohw());
        if (gw && n1 - n0 == 1) {
          g_rows = g_n;
        } else if (gw) {
          for (int64_t o = 0; o < g.O; ++o)
            std::copy_n(g_n + o * g.ohw(), g.ohw(), g_batch.data() + o * columns + (n - n0) * g.ohw());
          g_rows = g_batch.data();
        }
        if (gx) input_grad_gemm(g_n, n);
      }
      if (!gw) continue;
      for (int64_t k = 0; k < g.groups; ++k) {  // group k: g_k = its rows of the gradient
        for (int64_t n = n0; n < n1; ++n)
          im2col(input + n * image + k * group_image, one, cols.data() + (n - n0) * g.ohw(), pitch, padded);
        const P* g_k = g_rows + k * one.O * columns;
        S* partial = partials + part * wsize + k * group_weight;
        if (dw_transposed)  // dW^T (ckk, O) = cols @ g^T
          panel_gemm<P, S>({cols.data(), g.ckk(), columns, pitch, 1}, dense_transposed(g_k, columns, one.O), partial, true);
        else  // dW_k (O/groups, ckk) = g_k @ cols_k^T
          panel_gemm<P, S>(dense(g_k, one.O, columns), {cols.data(), columns, g.ckk(), 1, pitch}, partial, true);
      }
    }
  });
  if (gw) {
    std::vector<S> total(static_cast<size_t>(wsize), S(0));
    for (int64_t part = 0; part < parts; ++part)
      for (int64_t k = 0; k < wsize; ++k) total[size_t(k)] += weight_partials[size_t(part * wsize + k)];
    if (dw_transposed) {  // back to (O, ckk)
      std::vector<S> transposed(total.size());
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t k = 0; k < g.ckk(); ++k) transposed[size_t(o * g.ckk() + k)] = total[size_t(k * g.O + o)];
      total.swap(transposed);
    }
    store<T>(total.data(), wsize, gw->data_ptr<T>());
  }
  if (gb) {
    std::vector<S> total(static_cast<size_t>(g.O), S(0));
    for (int64_t o = 0; o < g.O; ++o) {
      double sum = 0;
      for (const std::vector<double>& partial : bias_partial) sum += partial[size_t(o)];
      total[size_t(o)] = S(sum);
    }
    store<T>(total.data(), g.O, gb->data_ptr<T>());
  }
}

// ---- the input gradient as a forward convolution ---------------------------------------------------
//
// With stride 1, conv2d's input gradient is itself a convolution: dy (N, O, OH, OW), zero-padded by
// (k - 1) * dilation - pad, correlated with the weight flipped in both spatial axes and with its
// channel axes swapped, w'[c][o][i][j] = w[o][c][k-1-i][k-1-j]. Computed that way it is
// conv_forward's im2col + one GEMM of depth O*k*k per image, and no col2im: the GEMM path's
// W^T @ g has a depth of only O (16 on ResNet's first stage), where the packed kernel spends as
// much on storing its tiles as on multiplying, and col2im then adds up k*k partial images.
bool input_grad_is_a_convolution(const ConvGeometry& g) {
  return g.stride == 1 && g.groups == 1 && g.kh == g.kw && g.pad <= (g.kh - 1) * g.dilation;
}

// The geometry of the input gradient as a convolution (input_grad_as_convolution): dy convolved
// with the flipped weight, padded by (k - 1) * dilation - pad.
ConvGeometry flipped_geometry(const ConvGeometry& g) {
  ConvGeometry t{g.N, g.O, g.OH, g.OW, g.C, g.kh, g.kw, 1, (g.kh - 1) * g.dilation - g.pad, g.H, g.W};
  t.dilation = g.dilation;
  return t;
}

// rows: computed by the direct convolution on wide rows (kernels/cpu/conv_wide_rows.h).
template <class T, class P>
void input_grad_as_convolution(const Tensor& w, const Tensor& gy, const ConvGeometry& g, const Tensor& dx, bool wide,
                               bool rows = false) {
  Tensor flipped = empty({g.C, g.O, g.kh, g.kw}, w.options());
  const T* src = w.data_ptr<T>();
  T* dst = flipped.data_ptr<T>();
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          dst[((c * g.O + o) * g.kh + i) * g.kw + j] = src[((o * g.C + c) * g.kh + (g.kh - 1 - i)) * g.kw + (g.kw - 1 - j)];
  const ConvGeometry t = flipped_geometry(g);
  if constexpr (!std::is_same_v<T, double>) {
    if (rows) {
      const std::vector<float> no_bias(size_t(g.C), 0.0f);
      return cpu::conv2d_wide_rows<T>(gy.data_ptr<T>(), dst, no_bias.data(), dx.data_ptr<T>(), t, false);
    }
  }
  conv_forward<T, P>(gy, flipped, Tensor(), dx, t, false, wide);
}

// Runs body.template operator()<T, P>() with the panel type for T (see as_panel).
template <class T, class Body>
void with_panel_type(const Body& body) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (hg::cpu::has_native_bf16()) return body.template operator()<T, bfloat16>();
  }
  body.template operator()<T, Acc<T>>();
}

// GEMM operands in f32: f32, f16, and bf16 on a CPU without native bf16 products.
bool f32_panels(DType dtype) { return dtype == f32 || dtype == f16 || (dtype == bf16 && !hg::cpu::has_native_bf16()); }

// Whether the CPU computes this stride-1 or stride-2 convolution (or, given the flipped geometry,
// its input gradient) directly on wide rows (kernels/cpu/conv_wide_rows.h) rather than with
// Winograd or im2col + GEMM. WideRows insists (an hg::Error where the CPU level or dtype cannot).
// Auto's rule, from bench/ops_bench --conv3x3 (its f32 wide-rows table; batch 128, 1 thread,
// Sapphire Rapids, best of runs; ms of the wide rows / Winograd / im2col):
//
//   layer            forward at avx512        at avx2 (HG_CPU_ISA)    input grad avx512 / avx2
//   16x28x28 -> 16   3.66 / 7.39 / 9.73       7.35 / 9.61 / 11.63     3.69 / 7.58   7.30 / 9.38
//   32x14x14 -> 32   3.62 / 6.25 / 9.63       6.15 / 5.83 / 9.24      3.69 / 4.93   6.21 / 5.85
//   64x7x7   -> 64   4.09 / 4.46 / 4.91       6.88 / 5.72 / 7.02      4.08 / 4.40   7.05 / 5.78
//   16x14x14 -> 32   1.81 / 2.84 / 3.60       3.29 / 3.46 / 4.65      1.99 / 3.86   3.33 / 4.36
//   3x28x28  -> 16   1.54 / 2.68 / 2.01       1.67 / 3.64 / 2.54      1.76 / 5.53   1.90 / 6.22
//   8x28x28  -> 8    1.31 / 3.00 / 3.51       1.82 / 3.65 / 3.79      1.20 / 2.99   1.87 / 3.32
//
// so: at the AVX-512 levels, for every kernel larger than 1x1 (with 32 registers a block holds 24
// sums, the kernel alone at 70-80% of the FMA peak, while Winograd's transforms and 16 small GEMMs
// cost more than its 2.25x fewer products save; 256x14x14 -> 256: 237 against im2col's 295 ms); at
// AVX2 (12 sums in 16 registers), except where Winograd takes a 3x3 layer (the Zen 3 table
// below says which). 1x1 convolutions stay on the GEMM: their columns are the image itself,
// nothing to save (MobileNet's 144x14x14 -> 24: 3.4 against 2.2 ms). NOTE: the AVX-512 column is
// Sapphire Rapids' (two 512-bit FMA ports); Zen 4 runs each 512-bit FMA as two 256-bit halves,
// where the AVX2 column's balance may hold instead -- not measured (no Zen 4 in this sitting).
//
// Stride 2 (the phase planes of kernels/cpu/wide_rows.h), im2col ms -> wide rows ms, same bench
// conditions (a harness over conv2d_with, 3x3, pad 1):
//
//   layer              forward at avx512   at avx2         weight grad at avx512   at avx2
//   16x28x28 -> 32     4.57 -> 2.54        4.58 -> 3.53    4.17 -> 3.31            4.49 -> 3.84
//   32x14x14 -> 64     3.87 -> 2.62        4.10 -> 4.43    3.82 -> 3.18            4.20 -> 4.10
//   64x14x14 -> 128   10.41 -> 8.82       12.76 -> 14.95  10.32 -> 12.46           12.88 -> 15.27
//   3x32x32 -> 16      0.93 -> 0.47        0.96 -> 0.61    0.98 -> 0.58            0.90 -> 0.69
//
// so the same rule at the AVX-512 levels; at AVX2, stride 2 only up to 16 input channels.
//
// On a real AVX2 CPU (AMD EPYC Zen 3, 1 thread, best of runs, ms of the wide rows / Winograd /
// im2col; a harness over conv2d_with and conv2d_backward_with) the 32-channel 14x14 layer goes the
// other way from Sapphire Rapids capped to AVX2 above:
//
//   layer                     forward                 input grad
//   32x14x14 -> 32            6.46 / 7.86 / 9.07      6.42 / 8.11 / 14.50   (three runs alike)
//   64x7x7   -> 64            8.06 / 7.11 / 8.05      8.21 / 7.07 / 10.03   (ops_bench --conv3x3)
//   32x26x26 -> 64, pad 0     38.77 / 36.68 / 43.41   48.74 / 43.12 / 50.35 (PyTorch's MNIST Net)
//
// so at AVX2 Winograd takes the 32+-channel layers only on maps of at most 7 columns (the wide
// rows' 9-column slots waste two in nine) or with 64+ output channels.
bool use_wide_rows(cpu::ConvAlgorithm algorithm, const ConvGeometry& g, DType dtype) {
  const bool possible = f32_panels(dtype) && cpu::wide_rows_apply(g);
  if (algorithm == cpu::ConvAlgorithm::WideRows)
    HG_CHECK(possible, "conv2d: wide rows asked for ", dtype, " or a convolution they cannot compute at CPU level ",
             hg::cpu::isa_name(hg::cpu::isa()));
  if (algorithm != cpu::ConvAlgorithm::Auto) return possible && algorithm == cpu::ConvAlgorithm::WideRows;
  if (g.stride == 2 && !hg::cpu::supports(hg::cpu::Isa::Avx512)) return possible && g.kh * g.kw > 1 && g.C <= 16;
  const bool winograd_wins = !hg::cpu::supports(hg::cpu::Isa::Avx512) && cpu::winograd_applies(g, dtype) && g.C >= 32 &&
                             g.O >= 32 && (g.OW <= 7 || g.O >= 64);
  return possible && g.kh * g.kw > 1 && !winograd_wins;
}

// Whether the CPU computes this convolution (and its input gradient) with Winograd F(2x2, 3x3)
// (kernels/cpu/winograd_conv.h) rather than im2col + GEMM. Auto's rule, from bench/ops_bench
// --conv3x3 (batch 128, 1 thread, Zen 4, best of runs; im2col time / Winograd time, forward and
// input gradient):
//
//   layer            avx512bf16 f32   avx512 f32 (bf16)       avx2 f32 (bf16)         generic f32
//   16x28x28 -> 16   1.18x / 1.09x    (not measured)          (not measured)          1.12 / 1.45
//   32x14x14 -> 32   1.45x / 1.45x    1.40 / 1.43 (1.33/1.27)  1.27 / 1.69 (1.18/1.47)  1.27 / 1.83
//   64x7x7   -> 64   1.45x / 1.45x    1.44 / 1.44 (1.37/1.35)  1.39 / 1.58 (1.33/1.49)  1.13 / 1.43
//   16x14x14 -> 32   1.24x / 1.00x    1.19 / 0.97 (1.03/0.93)  1.02 / 1.15 (0.92/1.10)  1.07 / 1.50
//   8x28x28  -> 8    0.98x / 1.05x
//   3x28x28  -> 16   0.65x / 0.35x
//
// so: both channel counts at least 16 (the transforms cost per channel, the GEMM per pair of
// channels, and a GEMM with fewer than 16 rows or a depth under 16 runs mostly padding); f32 and
// f16 (widened to f32 either way); bf16 only where the CPU has no native bf16 products: with
// AVX512-BF16 im2col's GEMM multiplies bf16 pairs at twice the f32 rate and wins (0.63x-0.86x for
// Winograd in f32). NOTE: Winograd with its 16 GEMMs on bf16 operands (the transformed tiles and
// filters rounded to bf16, vdpbf16ps, f32 sums) was tried: 1.13x / 1.22x on 64x7x7 after tuning its
// transforms, but the two extra roundings left 15% of the outputs outside T(bf16) of the f32
// result (error 2.6x im2col's against the f64 reference, 16 to 64 channels), so bf16 stays off
// Winograd. f64 stays on im2col (gradcheck's reference path).
bool use_winograd(cpu::ConvAlgorithm algorithm, const ConvGeometry& g, DType dtype) {
  switch (algorithm) {
    case cpu::ConvAlgorithm::Im2col:
    case cpu::ConvAlgorithm::Im2colFlipped:
    case cpu::ConvAlgorithm::WideColumns:
    case cpu::ConvAlgorithm::WideRows: return false;
    case cpu::ConvAlgorithm::Winograd:
      HG_CHECK(cpu::winograd_applies(g, dtype), "conv2d: Winograd asked for a convolution it cannot compute");
      return true;
    case cpu::ConvAlgorithm::Auto: break;
  }
  if (dtype == bf16 && hg::cpu::has_native_bf16()) return false;
  if (use_wide_rows(algorithm, g, dtype)) return false;  // (faster where they apply: use_wide_rows)
  return cpu::winograd_applies(g, dtype) && g.C >= 16 && g.O >= 16;
}

// Whether the CPU computes conv2d's input gradient as the convolution of the gradient with the
// flipped weight (input_grad_as_convolution) rather than W^T @ g + col2im, where Winograd does not.
// Auto's rule, from bench/ops_bench --conv3x3 (batch 128, 1 thread, Zen 4, best of runs; GEMM +
// col2im time / flipped convolution time):
//
//   layer            bf16 (avx512bf16)   f32
//   16x28x28 -> 16   1.38x               0.92x
//   32x14x14 -> 32   1.27x               0.98x
//   64x7x7   -> 64   1.39x               1.24x
//   8x28x28  -> 8    1.72x               1.11x
//   16x14x14 -> 32   0.87x               0.67x
//   3x28x28  -> 16   0.47x               0.32x
//
// so: 3x3 kernels with bf16 GEMM panels (native bf16 products) and at least as many input as
// output channels -- the flipped convolution's GEMM has C rows and depth 9 O, the other O deep and
// 9 C tall; with bf16 pairs a depth of 16 (8 pairs per tile) spends as much on storing each tile
// as on multiplying. In f32 the flipped convolution runs on wide rows where use_wide_rows says so
// (faster than both), elsewhere the 16+-channel layers run Winograd; the rest stays.
bool use_flipped_convolution(cpu::ConvAlgorithm algorithm, const ConvGeometry& g, DType dtype) {
  switch (algorithm) {
    case cpu::ConvAlgorithm::Im2col:
    case cpu::ConvAlgorithm::Winograd: return false;
    case cpu::ConvAlgorithm::Im2colFlipped:
    case cpu::ConvAlgorithm::WideColumns:
    case cpu::ConvAlgorithm::WideRows:
      HG_CHECK(input_grad_is_a_convolution(g), "conv2d: a flipped-convolution input gradient asked for a strided or grouped convolution");
      return true;
    case cpu::ConvAlgorithm::Auto: break;
  }
  if (input_grad_is_a_convolution(g) && use_wide_rows(algorithm, flipped_geometry(g), dtype)) return true;
  return input_grad_is_a_convolution(g) && g.kh == 3 && dtype == bf16 && hg::cpu::has_native_bf16() && g.C >= g.O;
}

// Whether the GEMMs of this stride-1 or stride-2 convolution (its forward, or the flipped
// convolution of its input gradient) read wide columns (cpu::conv2d_wide_columns) rather than im2col's. WideColumns
// insists (an hg::Error where the CPU or dtype cannot). Auto's rule, from bench/ops_bench
// --conv3x3 (batch 128, 1 thread, Sapphire Rapids, AMX; im2col time / wide-columns time):
//
//   convolution        C -> O    forward    flipped input gradient (O -> C)
//   16x28x28 -> 16     16 -> 16  1.21x      1.16x
//   32x14x14 -> 32     32 -> 32  1.08x      1.13x
//   64x7x7   -> 64     64 -> 64  1.01x      1.00x
//   8x28x28  -> 8      8 -> 8    1.08x      1.09x
//   16x14x14 -> 32     16 -> 32  0.88x      1.25x   (32 -> 16)
//   3x28x28  -> 16     3 -> 16   0.82x      1.34x   (16 -> 3)
//
// so: forward, where the convolution has at least as many input channels as outputs (a short B
// with many rows of A per column spends relatively more on the columns it computes and drops);
// the flipped input gradient, always (every row above). Both come out of one test on the forward's
// channels, C >= O: the flipped input gradient is only chosen where C >= O (use_flipped_convolution).
//
// Stride 2 (the phase planes of kernels/cpu/wide_rows.h), forward, im2col ms -> wide columns ms
// (a harness over conv2d_with, 3x3, pad 1, same conditions): 16x28x28 -> 32 3.44 -> 1.22,
// 32x14x14 -> 64 2.08 -> 1.06, 64x14x14 -> 128 4.77 -> 2.63, 3x32x32 -> 16 0.93 -> 0.44,
// 32x28x28 -> 32 6.75 -> 2.02 (stride 2's im2col gathers every other column, slow): always.
bool use_wide_columns(cpu::ConvAlgorithm algorithm, DType dtype, const ConvGeometry& g) {
  const bool possible = dtype == bf16 && cpu::wide_columns_available();
  if (algorithm == cpu::ConvAlgorithm::WideColumns)
    HG_CHECK(possible, "conv2d: wide columns asked for ", dtype, " on a CPU level without native bf16 products");
  return possible && (algorithm == cpu::ConvAlgorithm::WideColumns ||
                      (algorithm == cpu::ConvAlgorithm::Auto && (g.C >= g.O || g.stride == 2)));
}

// Whether the CPU computes conv2d's weight (and bias) gradient as dot products over wide rows
// (kernels/cpu/conv_weight_grad.h) rather than im2col + GEMM: for f32 GEMM panels (with native
// bf16 products the bf16 GEMM keeps it), under Auto and WideRows (which insists; the other explicit
// algorithms keep im2col's, the tests' reference). bench/ops_bench --conv3x3 (batch 128, 1 thread, f32, Sapphire
// Rapids, best of runs; im2col ms -> wide rows ms):
//
//   layer            at avx512       at avx2 (HG_CPU_ISA)
//   16x28x28 -> 16   10.96 -> 4.37   10.95 -> 7.95
//   32x14x14 -> 32    6.16 -> 4.14    8.39 -> 6.87
//   64x7x7   -> 64    4.60 -> 4.39    6.69 -> 7.16
//   16x14x14 -> 32    4.33 -> 2.17    4.34 -> 3.38
//   3x28x28  -> 16    3.35 -> 1.71    2.25 -> 1.65
//   8x28x28  -> 8     4.28 -> 1.34    4.13 -> 2.54
//
// so: for kernels larger than 1x1 with up to 64 output channels and 576 taps (C*kh*kw), ResNet-20's
// and the CNNs' layers, where the GEMM's dW has few rows; beyond them the GEMM's blocking wins
// (256x14x14 -> 256: 403 against 253 ms; MobileNet's 1x1 layers mostly lose too, 64x7x7 -> 384:
// 6.5 against 3.5 ms). At the AVX-512 levels wherever that holds; at AVX2 (12 sums in 16
// registers, a little below the GEMM's tile) where the dropped columns between images add at most
// 10% to the products -- not on 7x7 maps, whose 8-column slots add 14%. Stride 2 (phase planes)
// follows the same rule, with the plane's slot (half the padded width): see use_wide_rows' table.
//
// On a real AVX2 CPU (AMD EPYC Zen 3, 1 thread, best of runs; a harness over
// conv2d_backward_with; im2col ms against wide rows ms, two to five runs each) the GEMM wins
// wherever dW has 16 rows or more:
//
//   16x28x28 -> 16   11.0-11.4 against 13.2-14.2     16x28x28 -> 32, stride 2   6.9-7.2 against 7.9-9.9
//   3x28x28  -> 16    2.4-2.5  against  2.7-3.1      8x28x28  -> 8              4.2-5.6 against 3.1-4.4
//
// so at AVX2 the wide rows keep only the layers with at most 8 output channels (the GEMM's
// 6-row tiles fit 8 rows badly).
bool use_wide_weight_grad(cpu::ConvAlgorithm algorithm, const ConvGeometry& g, DType dtype) {
  const bool possible = f32_panels(dtype) && !cpu::is_depthwise(g) && cpu::wide_weight_grad_applies(g);
  if (algorithm == cpu::ConvAlgorithm::WideRows) {
    HG_CHECK(possible, "conv2d: wide rows asked for ", dtype, " or a convolution they cannot compute at CPU level ",
             hg::cpu::isa_name(hg::cpu::isa()));
    return true;
  }
  if (algorithm != cpu::ConvAlgorithm::Auto || !possible) return false;
  if (g.kh * g.kw == 1 || g.O > 64 || g.ckk() > 576) return false;
  return hg::cpu::supports(hg::cpu::Isa::Avx512) || (g.O <= 8 && cpu::wide_plane(g, 1).slot * 10 <= g.OW * 11);
}

// Whether a bf16 convolution's weight (and bias) gradient comes from the wide-columns plane
// (cpu::conv2d_weight_grad_wide_columns: the plane's tap rows @ dy^T, no im2col) rather than
// im2col + GEMM, on a CPU with native bf16 products. Auto only (ConvAlgorithm::WideColumns keeps
// im2col's weight gradient, bitwise the reference path's). A harness over conv2d_backward_with
// (batch 128, 1 thread, Sapphire Rapids, AMX, best of 7; dW + db, im2col ms -> wide columns ms):
//
//   16x28x28 -> 16   3.35 -> 2.64      8x28x28 -> 8     1.99 -> 1.68
//   32x14x14 -> 32   1.87 -> 1.57      3x28x28 -> 16    1.16 -> 1.08
//   64x7x7   -> 64   1.86 -> 1.39      144x14x14 -> 24  8.46 -> 7.25
//   1x28x28  -> 16   0.89 -> 0.95
//
// (then 1.31 and 1.18 for the 14x14 and 7x7 layers once the planes kept their zeros between parts)
//
// and stride 2 (phase planes): 16x28x28 -> 32 3.66 -> 1.11, 32x14x14 -> 64 2.24 -> 1.02,
// 64x14x14 -> 128 5.38 -> 3.27, 3x32x32 -> 16 0.99 -> 0.41, 32x28x28 -> 32 7.00 -> 2.09; larger
// layers: 32x26x26 -> 64 unpadded 8.72 -> 6.63, 64x7x7 -> 384 8.68 -> 6.00, 256x14x14 -> 256
// 69.7 -> 49.6; so: wherever the wide columns apply, except a single input channel (its taps
// are only 9 rows).
// NOTE: AVX512-BF16 without AMX (Zen 4) gathers the tap rows before packing them; not measured there.
bool use_wide_columns_weight_grad(cpu::ConvAlgorithm algorithm, const ConvGeometry& g, DType dtype) {
  return algorithm == cpu::ConvAlgorithm::Auto && dtype == bf16 && cpu::wide_columns_available() &&
         cpu::wide_columns_apply(g) && g.C > 1;
}

}  // namespace

Tensor cpu::conv2d_with(ConvAlgorithm algorithm, const Tensor& x, const Tensor& w, const Tensor& b,
                        const ConvGeometry& g, bool relu) {
  Tensor out = empty({g.N, g.O, g.OH, g.OW}, x.options());
  if (out.numel() == 0) return out;
  if (out.device().is_cuda()) {
    kernels::cuda::conv2d_forward(x, w, b, out, g);
    // relu's own functor: NaN stays NaN (cuDNN's fused activation would not promise it).
    if (relu) kernels::map_into<1>(out, {out}, math::Forward<math::Relu>{});
  } else if (cpu::is_depthwise(g)) {
    cpu::depthwise_conv2d(x, w, b, out, g, relu);
  } else if (use_wide_rows(algorithm, g, x.dtype())) {
    const std::vector<float> bias = bias_values<float>(b, g.O);
    visit_floating(x.dtype(), "conv2d", [&]<class T> {
      if constexpr (!std::is_same_v<T, double>)
        cpu::conv2d_wide_rows<T>(x.data_ptr<T>(), w.data_ptr<T>(), bias.data(), out.data_ptr<T>(), g, relu);
    });
  } else if (use_winograd(algorithm, g, x.dtype())) {
    cpu::winograd_conv2d(x, w, b, out, g, relu);
  } else {
    visit_floating(x.dtype(), "conv2d", [&]<class T> {
      const bool wide = use_wide_columns(algorithm, x.dtype(), g);
      HG_CHECK(algorithm != ConvAlgorithm::WideColumns || cpu::wide_columns_apply(g),
               "conv2d: wide columns asked for a grouped, 1x1 unpadded, dilated stride-2 or stride > 2 convolution");
      with_panel_type<T>([&]<class U, class P> { conv_forward<U, P>(x, w, b, out, g, relu, wide); });
    });
  }
  return out;
}

Conv2dGrads cpu::conv2d_backward_with(ConvAlgorithm algorithm, const Tensor& x, const Tensor& w, const Tensor& grad,
                                      const Tensor& y, const ConvGeometry& g, bool need_x, bool need_w, bool need_b) {
  Conv2dGrads r;
  if (need_x) r.x = empty(x.shape(), x.options());
  if (need_w) r.w = empty({g.O, g.group_in(), g.kh, g.kw}, x.options());
  if (need_b) r.b = empty({g.O}, x.options());
  Tensor gy = detail::dense(grad);
  const bool on_cpu = !x.device().is_cuda();
  const bool winograd_x = on_cpu && need_x && r.x.numel() > 0 && use_winograd(algorithm, g, x.dtype());
  const bool flipped_x = on_cpu && need_x && r.x.numel() > 0 && !winograd_x && !cpu::is_depthwise(g) &&
                         use_flipped_convolution(algorithm, g, x.dtype());
  // The ReLU epilogue's derivative: cuDNN, the depthwise, Winograd and flipped-convolution kernels
  // take the masked gradient; the GEMM path masks each image's gradient as it lays it out (conv_backward).
  const bool mask_first = !on_cpu || cpu::is_depthwise(g) || winograd_x || flipped_x;
  if (y.defined() && mask_first)  // (f16 and bf16 on the CPU: selected as bits, kernels/relu_bits.h)
    gy = kernels::relu_bits_apply(y) ? kernels::relu_backward_bits(y, gy, INFINITY)
                                     : kernels::map_to_new<2>(gy.shape(), {y, gy}, math::BackwardFromInput<math::Relu>{});
  if (!on_cpu) {
    kernels::cuda::conv2d_backward(x, w, gy, g, r.x, r.w, r.b);
    return r;
  }
  if (cpu::is_depthwise(g)) {
    cpu::depthwise_conv2d_backward(x, w, gy, g, need_x ? &r.x : nullptr, need_w ? &r.w : nullptr,
                                   need_b ? &r.b : nullptr);
    return r;
  }
  if (winograd_x || flipped_x) {  // the input gradient here; the weight's and bias's (if asked) below
    if (winograd_x) {
      cpu::winograd_conv2d_input_grad(w, gy, g, r.x);
    } else {
      visit_floating(x.dtype(), "conv2d", [&]<class T> {
        const bool wide = use_wide_columns(algorithm, x.dtype(), g);
        const bool rows = use_wide_rows(algorithm, flipped_geometry(g), x.dtype());
        with_panel_type<T>([&]<class U, class P> { input_grad_as_convolution<U, P>(w, gy, g, r.x, wide, rows); });
      });
    }
    need_x = false;
    if (!need_w && !need_b) return r;
  }
  if (need_w && r.w.numel() > 0 && use_wide_weight_grad(algorithm, g, x.dtype())) {  // the weight's and bias's
    visit_floating(x.dtype(), "conv2d", [&]<class T> {
      if constexpr (!std::is_same_v<T, double>) {
        const T* relu_output = y.defined() && !mask_first ? y.data_ptr<T>() : nullptr;
        std::vector<float> dw(size_t(r.w.numel())), db(size_t(g.O));
        cpu::conv2d_weight_grad_wide<T>(x.data_ptr<T>(), gy.data_ptr<T>(), relu_output, g, dw.data(),
                                        need_b ? db.data() : nullptr);
        store<T>(dw.data(), r.w.numel(), r.w.data_ptr<T>());
        if (need_b) store<T>(db.data(), g.O, r.b.data_ptr<T>());
      }
    });
    need_w = need_b = false;
    if (!need_x) return r;
  }
  if (need_w && r.w.numel() > 0 && use_wide_columns_weight_grad(algorithm, g, x.dtype())) {
    const bfloat16* relu_output = y.defined() && !mask_first ? y.data_ptr<bfloat16>() : nullptr;
    std::vector<float> dw(size_t(r.w.numel())), db(size_t(g.O));
    cpu::conv2d_weight_grad_wide_columns(x.data_ptr<bfloat16>(), gy.data_ptr<bfloat16>(), relu_output, g, dw.data(),
                                         need_b ? db.data() : nullptr);
    store<bfloat16>(dw.data(), r.w.numel(), r.w.data_ptr<bfloat16>());
    if (need_b) store<bfloat16>(db.data(), g.O, r.b.data_ptr<bfloat16>());
    need_w = need_b = false;
    if (!need_x) return r;
  }
  visit_floating(x.dtype(), "conv2d", [&]<class T> {
    with_panel_type<T>([&]<class U, class P> {
      const U* relu_output = y.defined() && !mask_first ? y.data_ptr<U>() : nullptr;
      conv_backward<U, P>(x, need_x ? w : Tensor(), gy, relu_output, g, need_x ? &r.x : nullptr,
                          need_w ? &r.w : nullptr, need_b ? &r.b : nullptr);
    });
  });
  return r;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool relu) {
  return cpu::conv2d_with(cpu::ConvAlgorithm::Auto, x, w, b, g, relu);
}

Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& grad, const Tensor& y,
                            const ConvGeometry& g, bool need_x, bool need_w, bool need_b) {
  return cpu::conv2d_backward_with(cpu::ConvAlgorithm::Auto, x, w, grad, y, g, need_x, need_w, need_b);
}

Tensor conv2d_input_grad(const Tensor& w, const Tensor& grad, const Tensor& bias, const ConvGeometry& g) {
  // conv2d_backward reads the input itself only for the weight's gradient; for the input's it
  // needs its shape, which an uninitialised tensor gives.
  const Tensor input_shape = empty({g.N, g.C, g.H, g.W}, grad.options());
  Tensor out = conv2d_backward(input_shape, w, grad, Tensor(), g, true, false, false).x;
  if (bias.defined() && out.numel() > 0) map_into<2>(out, {out, detail::dense_view(detail::dense(bias), {1, g.C, 1, 1})}, math::Add{});
  return out;
}

}  // namespace hg::kernels
