// Depthwise convolution: one padded plane per channel, each tap a scaled, shifted row added in.
//
//   out[o][oh][ow] = b[o] + sum over taps (i, j) of w[o][i][j] * padded[c][oh*s + i*d][ow*s + j*d]
//
// with c = o / m the channel output o reads (m output channels per input channel). Everything is
// computed in the accumulation type (f32 for 16-bit data) and rounded once when stored.
// Backward, one channel per task: dx's padded plane gathers w * dy through the same index map,
// dw sums dy * padded tap by tap (into per-column partials, so the loop vectorises without
// reordering a sum), db sums dy. Every channel's sums run over the images in order: the result
// does not depend on the thread count.
#include "kernels/cpu/depthwise_conv.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "core/visit.h"
#include "kernels/cpu/lane_sum.h"

namespace hg::kernels::cpu {

namespace {

template <class T, class S>
void widen(const T* src, S* dst, int64_t n) {
  if constexpr (std::is_same_v<T, S>) std::copy_n(src, n, dst);
  else convert_to_float(src, dst, size_t(n));
}

template <class S, class T>
void narrow(const S* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, S>) std::copy_n(src, n, dst);
  else convert_from_float(src, dst, size_t(n));
}

// The padded plane (Hp, Wp) of one input channel: zeros around the image.
template <class T, class S>
void pad_plane(const T* plane, const ConvGeometry& g, std::vector<S>& padded) {
  const int64_t Wp = g.W + 2 * g.pad;
  padded.assign(size_t((g.H + 2 * g.pad) * Wp), S(0));
  for (int64_t h = 0; h < g.H; ++h) widen(plane + h * g.W, padded.data() + (h + g.pad) * Wp + g.pad, g.W);
}

// With stride 1, output row oh starts Wp elements after row oh - 1 in the padded plane's
// coordinates, as the input rows do: computed at the padded width, the rows of every tap form one
// contiguous run of wide_span elements (OH rows of Wp, the last one cut at OW), so each tap is a
// single long vector loop instead of OH short ones (OW is 7 to 28 here). The Wp - OW extra
// columns per row are computed and dropped.
inline int64_t wide_span(const ConvGeometry& g) { return (g.OH - 1) * (g.W + 2 * g.pad) + g.OW; }

template <class T>
std::vector<Acc<T>> widened(const Tensor& t) {  // t contiguous
  std::vector<Acc<T>> out(size_t(t.numel()));
  widen(t.data_ptr<T>(), out.data(), t.numel());
  return out;
}

template <class T>
void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g, bool relu) {
  using S = Acc<T>;
  const std::vector<S> weight = widened<T>(w);
  const std::vector<S> bias = bias_values<S>(b, g.O);
  const int64_t m = g.group_out(), taps = g.kh * g.kw, Wp = g.W + 2 * g.pad;
  const T* input = x.data_ptr<T>();
  T* output = out.data_ptr<T>();
  parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<S> padded, row, wide;
    row.resize(size_t(g.OW));
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.C, c = nc % g.C;
      pad_plane(input + nc * g.H * g.W, g, padded);
      for (int64_t k = 0; k < m; ++k) {
        const int64_t o = c * m + k;
        const S* w_o = weight.data() + o * taps;
        T* dst = output + (n * g.O + o) * g.ohw();
        if (g.stride == 1) {  // whole planes at once: see wide_span
          const int64_t span = wide_span(g);
          wide.assign(size_t(span), bias[size_t(o)]);
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const S tap = w_o[i * g.kw + j];
              const S* src = padded.data() + (i * Wp + j) * g.dilation;
              for (int64_t e = 0; e < span; ++e) wide[size_t(e)] += tap * src[e];
            }
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            S* row_values = wide.data() + oh * Wp;
            if (relu)
              for (int64_t ow = 0; ow < g.OW; ++ow) row_values[ow] = row_values[ow] < S(0) ? S(0) : row_values[ow];
            narrow(row_values, dst + oh * g.OW, g.OW);
          }
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          std::fill(row.begin(), row.end(), bias[size_t(o)]);
          for (int64_t i = 0; i < g.kh; ++i) {
            const S* src_row = padded.data() + (oh * g.stride + i * g.dilation) * Wp;
            for (int64_t j = 0; j < g.kw; ++j) {
              const S tap = w_o[i * g.kw + j];
              const S* src = src_row + j * g.dilation;
              if (g.stride == 1)
                for (int64_t ow = 0; ow < g.OW; ++ow) row[size_t(ow)] += tap * src[ow];
              else
                for (int64_t ow = 0; ow < g.OW; ++ow) row[size_t(ow)] += tap * src[ow * g.stride];
            }
          }
          if (relu)  // NaN stays NaN, like relu
            for (S& v : row) v = v < S(0) ? S(0) : v;
          narrow(row.data(), dst + oh * g.OW, g.OW);
        }
      }
    }
  });
}

template <class T>
void backward(const Tensor& x, const Tensor& w, const Tensor& dy, const ConvGeometry& g, Tensor* gx, Tensor* gw,
              Tensor* gb) {
  using S = Acc<T>;
  const std::vector<S> weight = gx ? widened<T>(w) : std::vector<S>();
  const int64_t m = g.group_out(), taps = g.kh * g.kw, Hp = g.H + 2 * g.pad, Wp = g.W + 2 * g.pad;
  std::vector<double> weight_sums(gw ? size_t(g.O * taps) : 0, 0.0), bias_sums(gb ? size_t(g.O) : 0, 0.0);
  const T* input = x.data_ptr<T>();
  const T* grad = dy.data_ptr<T>();
  parallel_for(0, g.C, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<S> padded, dpadded, dy_plane, partial, dy_wide;
    dy_plane.resize(size_t(g.ohw()));
    partial.resize(size_t(g.OW));
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t n = 0; n < g.N; ++n) {
        if (gw) pad_plane(input + (n * g.C + c) * g.H * g.W, g, padded);
        if (gx) dpadded.assign(size_t(Hp * Wp), S(0));
        for (int64_t k = 0; k < m; ++k) {
          const int64_t o = c * m + k;
          widen(grad + (n * g.O + o) * g.ohw(), dy_plane.data(), g.ohw());
          if (gb) {
            double total = 0;
            for (const S v : dy_plane) total += double(v);
            bias_sums[size_t(o)] += total;
          }
          if (g.stride == 1) {  // the wide layout of the forward, dy zero in the extra columns
            const int64_t span = wide_span(g);
            dy_wide.assign(size_t(span + Wp), S(0));
            for (int64_t oh = 0; oh < g.OH; ++oh)
              std::copy_n(dy_plane.data() + oh * g.OW, g.OW, dy_wide.data() + oh * Wp);
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t offset = (i * Wp + j) * g.dilation;
                if (gw) {
                  const S* src = padded.data() + offset;
                  const S* d = dy_wide.data();
                  weight_sums[size_t(o * taps + i * g.kw + j)] +=
                      lane_sum(span, [src, d](int64_t e) { return double(d[e] * src[e]); });
                }
                if (gx) {
                  const S tap = weight[size_t(o * taps + i * g.kw + j)];
                  S* dst = dpadded.data() + offset;
                  for (int64_t e = 0; e < span; ++e) dst[e] += tap * dy_wide[size_t(e)];
                }
              }
            continue;
          }
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t offset = i * g.dilation * Wp + j * g.dilation;
              if (gw) {
                std::fill(partial.begin(), partial.end(), S(0));
                for (int64_t oh = 0; oh < g.OH; ++oh) {
                  const S* src = padded.data() + oh * g.stride * Wp + offset;
                  const S* d = dy_plane.data() + oh * g.OW;
                  for (int64_t ow = 0; ow < g.OW; ++ow) partial[size_t(ow)] += d[ow] * src[ow * g.stride];
                }
                double total = 0;
                for (const S v : partial) total += double(v);
                weight_sums[size_t(o * taps + i * g.kw + j)] += total;
              }
              if (gx) {
                const S tap = weight[size_t(o * taps + i * g.kw + j)];
                for (int64_t oh = 0; oh < g.OH; ++oh) {
                  S* dst = dpadded.data() + oh * g.stride * Wp + offset;
                  const S* d = dy_plane.data() + oh * g.OW;
                  if (g.stride == 1)
                    for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow] += tap * d[ow];
                  else
                    for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow * g.stride] += tap * d[ow];
                }
              }
            }
        }
        if (gx) {  // the image's part of the padded gradient
          T* dst = gx->data_ptr<T>() + (n * g.C + c) * g.H * g.W;
          for (int64_t h = 0; h < g.H; ++h) narrow(dpadded.data() + (h + g.pad) * Wp + g.pad, dst + h * g.W, g.W);
        }
      }
  });
  const auto store = [](const std::vector<double>& sums, Tensor* target) {
    std::vector<S> values(sums.begin(), sums.end());
    narrow(values.data(), target->data_ptr<T>(), int64_t(values.size()));
  };
  if (gw) store(weight_sums, gw);
  if (gb) store(bias_sums, gb);
}

}  // namespace

void depthwise_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g,
                      bool relu) {
  visit_floating(x.dtype(), "conv2d", [&]<class T> { forward<T>(x, w, b, out, g, relu); });
}

void depthwise_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const ConvGeometry& g, Tensor* gx,
                               Tensor* gw, Tensor* gb) {
  visit_floating(x.dtype(), "conv2d", [&]<class T> { backward<T>(x, w, dy, g, gx, gw, gb); });
}

}  // namespace hg::kernels::cpu
