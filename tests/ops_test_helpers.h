// Helpers shared by tests/test_ops_*.cpp (the ops' behaviour, docs/testing.md scenarios 1, 3-7, 10-16):
// the naive f64 reference every op is checked against (namespace ref), the tolerances kF32, kExact
// and gemm_tolerance(), CHECK_CLOSE_WITH / CHECK_MATCHES_REF, scenario 3's 16-bit rule
// (CHECK_LOW_PRECISION), and the random inputs normal() and positive(). Helpers only; the
// TEST_CASEs are in the .cpp files (and test_op_db.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

using hg::Tensor;
using hg_test::Tolerance;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline const Tolerance kF32 = hg_test::tolerance_for(hg::f32);
inline const Tolerance kExact{0.0, 0.0};

// NOTE: matmul, linear and conv2d accumulate K = (inner dimension) products in f32 registers, so
// their error grows like sqrt(K) * 2^-24 * |a||b| rather than staying within one rounding of the
// result. As PyTorch does per op, they get a documented looser tolerance: rtol 1e-5 and an
// atol of 1e-5 * sqrt(K) (inputs here are N(0, 1), so |a||b| ~ 1).
inline Tolerance gemm_tolerance(int64_t K) { return {1e-5, 1e-5 * std::max(1.0, std::sqrt(double(K)))}; }

#define CHECK_CLOSE_WITH(actual, expected, tolerance)                                            \
  do {                                                                                           \
    const auto close_report_ = hg_test::compare((actual), (expected), (tolerance));              \
    CHECK_MESSAGE(!close_report_.has_value(), close_report_.value_or(""));                       \
  } while (0)

// ---- the naive f64 reference -------------------------------------------------------------------------
// Every op written the obvious way on row-major std::vector<double>, with no strides, SIMD,
// threads or reuse of halfgrad code, so that a bug in a kernel cannot also be in its oracle.

namespace ref {

struct Array {
  hg::Shape shape;
  std::vector<double> v;
};

inline int64_t numel(const hg::Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline Array of(const Tensor& t) { return {t.shape(), t.to_vector<double>()}; }
inline Tensor tensor(const Array& a) { return hg::from_vector(a.v, a.shape); }  // f64

inline std::vector<int64_t> coords(int64_t i, const hg::Shape& s) {
  std::vector<int64_t> c(s.size());
  for (int d = s.ndim() - 1; d >= 0; --d) {
    c[size_t(d)] = i % s[d];
    i /= s[d];
  }
  return c;
}

inline int64_t offset(const std::vector<int64_t>& c, const hg::Shape& s) {
  int64_t o = 0;
  for (size_t d = 0; d < s.size(); ++d) o = o * s[d] + c[d];
  return o;
}

template <class F>
inline Array map(const Array& a, F f) {
  Array out{a.shape, a.v};
  for (double& x : out.v) x = f(x);
  return out;
}

// NumPy broadcasting: the element of `a` that output coordinates `c` read.
inline double broadcast_at(const Array& a, const std::vector<int64_t>& c) {
  const size_t lead = c.size() - a.shape.size();
  int64_t o = 0;
  for (size_t d = 0; d < a.shape.size(); ++d) o = o * a.shape[d] + (a.shape[d] == 1 ? 0 : c[lead + d]);
  return a.v[size_t(o)];
}

template <class F>
inline Array zip(const Array& a, const Array& b, F f) {
  const size_t n = std::max(a.shape.size(), b.shape.size());
  hg::Shape shape(n);
  for (size_t d = 0; d < n; ++d) {
    const int64_t sa = d < n - a.shape.size() ? 1 : a.shape[d - (n - a.shape.size())];
    const int64_t sb = d < n - b.shape.size() ? 1 : b.shape[d - (n - b.shape.size())];
    shape[d] = sa == 1 ? sb : sa;
  }
  Array out{shape, std::vector<double>(size_t(numel(shape)))};
  for (int64_t i = 0; i < numel(shape); ++i) {
    const auto c = coords(i, shape);
    out.v[size_t(i)] = f(broadcast_at(a, c), broadcast_at(b, c));
  }
  return out;
}

// Folds the elements of each reduced group with f, starting from init.
template <class F>
inline Array reduce(const Array& a, std::vector<int64_t> dims, bool keepdim, double init, F f) {
  const int nd = a.shape.ndim();
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : dims)
    if (nd > 0) reduced[size_t((d + nd) % nd)] = true;
  hg::Shape keep, kept;
  for (int d = 0; d < nd; ++d) {
    keep.push_back(reduced[size_t(d)] ? 1 : a.shape[d]);
    if (!reduced[size_t(d)]) kept.push_back(a.shape[d]);
  }
  Array out{keep, std::vector<double>(size_t(numel(keep)), init)};
  for (int64_t i = 0; i < numel(a.shape); ++i) {
    auto c = coords(i, a.shape);
    for (int d = 0; d < nd; ++d)
      if (reduced[size_t(d)]) c[size_t(d)] = 0;
    double& acc = out.v[size_t(offset(c, keep))];
    acc = f(acc, a.v[size_t(i)]);
  }
  if (!keepdim) out.shape = kept;
  return out;
}

inline std::vector<int64_t> all_dims(const Array& a) {
  std::vector<int64_t> dims;
  for (int d = 0; d < a.shape.ndim(); ++d) dims.push_back(d);
  return dims;
}

inline Array sum(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  return reduce(a, std::move(dims), keepdim, 0.0, [](double acc, double x) { return acc + x; });
}

inline Array mean(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  Array s = sum(a, dims, keepdim);
  const double count = double(numel(a.shape)) / double(std::max<int64_t>(numel(s.shape), 1));
  for (double& x : s.v) x /= count;
  return s;
}

inline double nan_max(double acc, double x) { return std::isnan(acc) || std::isnan(x) ? kNaN : std::max(acc, x); }

inline Array amax(const Array& a, int64_t dim, bool keepdim) { return reduce(a, {dim}, keepdim, -kInf, nan_max); }

// (M,K)@(K,N), (B,M,K)@(B,K,N), and a 2-D or batch-1 operand broadcast over the other's batch.
inline Array matmul(const Array& a_in, const Array& b_in) {
  // Vectors as a one-row (left) or one-column (right) matrix; the batch dims broadcast.
  const bool row = a_in.shape.ndim() == 1, column = b_in.shape.ndim() == 1;
  hg::Shape sa = a_in.shape, sb = b_in.shape;
  if (row) sa.insert(sa.begin(), 1);
  if (column) sb.push_back(1);
  const int64_t M = sa[sa.ndim() - 2], K = sa.back(), N = sb.back();
  const hg::Shape batch_a(std::vector<int64_t>(sa.begin(), sa.end() - 2));
  const hg::Shape batch_b(std::vector<int64_t>(sb.begin(), sb.end() - 2));
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  hg::Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) {
    const int64_t da = d < nb - batch_a.size() ? 1 : batch_a[d - (nb - batch_a.size())];
    const int64_t db = d < nb - batch_b.size() ? 1 : batch_b[d - (nb - batch_b.size())];
    batch[d] = da == 1 ? db : da;
  }
  // The flat matrix index of one operand at batch coordinates c (its size-1 dims broadcast).
  auto matrix_at = [&](const hg::Shape& own, const std::vector<int64_t>& c) {
    int64_t o = 0;
    for (size_t d = 0; d < own.size(); ++d) o = o * own[d] + (own[d] == 1 ? 0 : c[nb - own.size() + d]);
    return o;
  };
  Array out{batch, std::vector<double>(size_t(numel(batch) * M * N), 0.0)};
  for (int64_t n = 0; n < numel(batch); ++n) {
    const std::vector<int64_t> c = coords(n, batch);
    const double* pa = a_in.v.data() + matrix_at(batch_a, c) * M * K;
    const double* pb = b_in.v.data() + matrix_at(batch_b, c) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double total = 0;
        for (int64_t k = 0; k < K; ++k) total += pa[i * K + k] * pb[k * N + j];
        out.v[size_t((n * M + i) * N + j)] = total;
      }
  }
  if (!row) out.shape.push_back(M);
  if (!column) out.shape.push_back(N);
  return out;
}

// x (..., in) @ w (out, in)^T + bias (out), bias optional (empty).
inline Array linear(const Array& x, const Array& w, const std::vector<double>& bias) {
  const int64_t in = w.shape[1], outs = w.shape[0];
  int64_t rows = 1;  // the leading dims' product (not numel / in: in may be 0)
  for (int d = 0; d + 1 < x.shape.ndim(); ++d) rows *= x.shape[d];
  Array out{x.shape, std::vector<double>(size_t(rows * outs))};
  out.shape.back() = outs;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outs; ++o) {
      double total = bias.empty() ? 0.0 : bias[size_t(o)];
      for (int64_t k = 0; k < in; ++k) total += x.v[size_t(r * in + k)] * w.v[size_t(o * in + k)];
      out.v[size_t(r * outs + o)] = total;
    }
  return out;
}

// Views `shape` around `dim` as (outer, D, inner).
inline void lines(const hg::Shape& shape, int64_t dim, int64_t& outer, int64_t& D, int64_t& inner) {
  outer = D = inner = 1;
  if (shape.empty()) return;
  const int d = int((dim + shape.ndim()) % shape.ndim());
  D = shape[d];
  for (int k = 0; k < d; ++k) outer *= shape[k];
  for (int k = d + 1; k < shape.ndim(); ++k) inner *= shape[k];
}

inline Array softmax(const Array& a, int64_t dim, bool log) {
  int64_t outer, D, inner;
  lines(a.shape, dim, outer, D, inner);
  Array out = a;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const auto at = [&](int64_t d) { return size_t((o * D + d) * inner + i); };
      double max = -kInf;
      for (int64_t d = 0; d < D; ++d) max = std::max(max, a.v[at(d)]);
      double total = 0;
      for (int64_t d = 0; d < D; ++d) total += std::exp(a.v[at(d)] - max);
      for (int64_t d = 0; d < D; ++d)
        out.v[at(d)] = log ? a.v[at(d)] - max - std::log(total) : std::exp(a.v[at(d)] - max) / total;
    }
  return out;
}

// PyTorch's formula: mean over non-ignored rows of (1 - eps) * nll + eps * (lse - mean(row)).
inline double cross_entropy(const Array& logits, const std::vector<int64_t>& targets, double eps = 0.0,
                            int64_t ignore_index = -100) {
  const int64_t N = logits.shape[0], C = logits.shape[1];
  double total = 0;
  int64_t valid = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[size_t(n)] == ignore_index) continue;
    const double* row = &logits.v[size_t(n * C)];
    double max = -kInf, row_mean = 0, sum_exp = 0;
    for (int64_t c = 0; c < C; ++c) max = std::max(max, row[c]), row_mean += row[c] / double(C);
    for (int64_t c = 0; c < C; ++c) sum_exp += std::exp(row[c] - max);
    const double lse = max + std::log(sum_exp);
    // (eps = 0: no smoothing term at all, as PyTorch -- 0 * inf would be NaN for a -inf logit)
    total += (1 - eps) * (lse - row[targets[size_t(n)]]) + (eps > 0 ? eps * (lse - row_mean) : 0.0);
    ++valid;
  }
  return total / double(valid);
}

// The definition, one output at a time: weight (O, C / groups, kh, kw), taps `dilation` apart,
// output channel o reading input channels [g * C/groups, (g+1) * C/groups) of its group g.
inline Array conv2d(const Array& x, const Array& w, const std::vector<double>& bias, int64_t stride, int64_t pad,
                    int64_t dilation = 1, int64_t groups = 1) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], Cg = w.shape[1], kh = w.shape[2], kw = w.shape[3], Og = O / groups;
  const int64_t OH = (H + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
  const int64_t OW = (W + 2 * pad - dilation * (kw - 1) - 1) / stride + 1;
  Array out{{N, O, OH, OW}, std::vector<double>(size_t(N * O * OH * OW))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double total = bias.empty() ? 0.0 : bias[size_t(o)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t h = oh * stride + i * dilation - pad, ww = ow * stride + j * dilation - pad;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                const int64_t channel = (o / Og) * Cg + c;
                total += x.v[size_t(((n * C + channel) * H + h) * W + ww)] * w.v[size_t(((o * Cg + c) * kh + i) * kw + j)];
              }
          out.v[size_t(((n * O + o) * OH + oh) * OW + ow)] = total;
        }
  return out;
}

// PyTorch's pooling output size (floor, or ceil without a window starting in the right padding).
inline int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = in + 2 * pad - k;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

// max or average over each window, padding skipped by the max and counted as zeros by the average
// when count_include_pad (then the divisor is the window cut at the right padding's end).
inline Array pool2d(const Array& x, int64_t k, int64_t s, bool max, int64_t pad = 0, bool ceil_mode = false,
                    bool count_include_pad = true) {
  const int64_t P = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = pooled_size(H, k, s, pad, ceil_mode), OW = pooled_size(W, k, s, pad, ceil_mode);
  Array out{{x.shape[0], x.shape[1], OH, OW}, std::vector<double>(size_t(P * OH * OW))};
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = max ? -kInf : 0.0;
        int64_t inside = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t h = oh * s - pad + i, w = ow * s - pad + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x.v[size_t((p * H + h) * W + w)];
            acc = max ? nan_max(acc, v) : acc + v;
            ++inside;
          }
        const int64_t rows = std::min(oh * s - pad + k, H + pad) - (oh * s - pad);
        const int64_t cols = std::min(ow * s - pad + k, W + pad) - (ow * s - pad);
        out.v[size_t((p * OH + oh) * OW + ow)] = max ? acc : acc / double(count_include_pad ? rows * cols : inside);
      }
  return out;
}

// Adaptive pooling: bin (i, j) holds rows [floor(i H / OH), ceil((i + 1) H / OH)) and the like
// columns; reduce(values) gives its output.
template <class F>
inline Array adaptive_pool2d(const Array& x, int64_t OH, int64_t OW, F reduce) {
  const int64_t P = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3];
  Array out{{x.shape[0], x.shape[1], OH, OW}, std::vector<double>(size_t(P * OH * OW))};
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
        const int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        std::vector<double> bin;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) bin.push_back(x.v[size_t((p * H + h) * W + w)]);
        out.v[size_t((p * OH + oh) * OW + ow)] = reduce(bin);
      }
  return out;
}

inline Array adaptive_avg_pool2d(const Array& x, int64_t OH, int64_t OW) {
  return adaptive_pool2d(x, OH, OW, [](const std::vector<double>& bin) {
    double total = 0;
    for (double v : bin) total += v;
    return total / double(bin.size());
  });
}

// Per-channel statistics of x (N, C, ...): biased variance, as batch_norm normalises with.
inline void channel_stats(const Array& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t N = x.shape[0], C = x.shape[1], S = numel(x.shape) / std::max<int64_t>(N * C, 1);
  mean.assign(size_t(C), 0.0);
  var.assign(size_t(C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) mean[size_t(c)] += x.v[size_t((n * C + c) * S + s)] / double(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double d = x.v[size_t((n * C + c) * S + s)] - mean[size_t(c)];
        var[size_t(c)] += d * d / double(N * S);
      }
  }
}

inline Array batch_norm(const Array& x, const std::vector<double>& mean, const std::vector<double>& var,
                        const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const int64_t N = x.shape[0], C = x.shape[1], S = numel(x.shape) / std::max<int64_t>(N * C, 1);
  Array out = x;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        double& y = out.v[size_t((n * C + c) * S + s)];
        y = (y - mean[size_t(c)]) / std::sqrt(var[size_t(c)] + eps);
        if (!w.empty()) y *= w[size_t(c)];
        if (!b.empty()) y += b[size_t(c)];
      }
  return out;
}

inline Array layer_norm(const Array& x, int64_t D, const std::vector<double>& w, const std::vector<double>& b, double eps) {
  Array out = x;
  for (int64_t r = 0; r < numel(x.shape) / D; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += x.v[size_t(r * D + i)] / double(D);
    for (int64_t i = 0; i < D; ++i) var += (x.v[size_t(r * D + i)] - mean) * (x.v[size_t(r * D + i)] - mean) / double(D);
    for (int64_t i = 0; i < D; ++i) {
      double& y = out.v[size_t(r * D + i)];
      y = (y - mean) / std::sqrt(var + eps);
      if (!w.empty()) y *= w[size_t(i)];
      if (!b.empty()) y += b[size_t(i)];
    }
  }
  return out;
}

inline double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// conv1d straight from its definition: y[n, o, l] = b[o] + sum over the group's channels and taps.
inline Array conv1d(const Array& x, const Array& w, const std::vector<double>& bias, int64_t stride, int64_t pad,
                    int64_t dilation = 1, int64_t groups = 1) {
  const int64_t N = x.shape[0], C = x.shape[1], L = x.shape[2], O = w.shape[0], Cg = w.shape[1], k = w.shape[2];
  const int64_t OL = (L + 2 * pad - dilation * (k - 1) - 1) / stride + 1, Og = O / groups;
  Array out{{N, O, OL}, std::vector<double>(size_t(N * O * OL))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t ol = 0; ol < OL; ++ol) {
        double total = bias.empty() ? 0.0 : bias[size_t(o)];
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t l = ol * stride + j * dilation - pad;
            if (l < 0 || l >= L) continue;
            total += x.v[size_t((n * C + (o / Og) * Cg + c) * L + l)] * w.v[size_t((o * Cg + c) * k + j)];
          }
        out.v[size_t((n * O + o) * OL + ol)] = total;
      }
  return out;
}

// conv_transpose2d as the scatter it is defined by: input (n, c, h, w) adds x * w[c, o, i, j] to
// output (h * stride - pad + i * dilation, w * stride - pad + j * dilation) of each channel o of
// its group.
inline Array conv_transpose2d(const Array& x, const Array& w, const std::vector<double>& bias, int64_t stride,
                              int64_t pad, int64_t output_padding, int64_t groups, int64_t dilation) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t Og = w.shape[1], kh = w.shape[2], kw = w.shape[3], O = Og * groups, Cg = C / groups;
  const int64_t OH = (H - 1) * stride - 2 * pad + dilation * (kh - 1) + output_padding + 1;
  const int64_t OW = (W - 1) * stride - 2 * pad + dilation * (kw - 1) + output_padding + 1;
  Array out{{N, O, OH, OW}, std::vector<double>(size_t(N * O * OH * OW))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < OH * OW; ++k) out.v[size_t((n * O + o) * OH * OW + k)] = bias.empty() ? 0.0 : bias[size_t(o)];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t o = 0; o < Og; ++o)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t oh = h * stride - pad + i * dilation, ow = ww * stride - pad + j * dilation;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                const int64_t channel = (c / Cg) * Og + o;
                out.v[size_t(((n * O + channel) * OH + oh) * OW + ow)] +=
                    x.v[size_t(((n * C + c) * H + h) * W + ww)] * w.v[size_t(((c * Og + o) * kh + i) * kw + j)];
              }
  return out;
}

// The maximum of each adaptive_avg_pool2d bin (NaN wins).
inline Array adaptive_max_pool2d(const Array& x, int64_t OH, int64_t OW) {
  return adaptive_pool2d(x, OH, OW, [](const std::vector<double>& bin) {
    double best = -kInf;
    for (double v : bin) best = nan_max(best, v);
    return best;
  });
}

// PyTorch's upsample_nearest2d / upsample_bilinear2d formulas, in double (the nearest index in
// float, as PyTorch computes it). factor > 0: the user's scale factor.
inline Array interpolate(const Array& x, int64_t OH, int64_t OW, bool bilinear, bool align_corners, double factor) {
  const int64_t P = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3];
  const auto scale = [&](int64_t in, int64_t out) {
    if (align_corners) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
    return factor > 0 ? 1.0 / factor : double(in) / double(out);
  };
  const double sh = scale(H, OH), sw = scale(W, OW);
  // (index, weight) pairs along one axis
  const auto taps = [&](int64_t o, int64_t in, double s) -> std::vector<std::pair<int64_t, double>> {
    if (!bilinear) return {{std::min<int64_t>(int64_t(std::floor(float(o) * float(s))), in - 1), 1.0}};
    double src = align_corners ? s * double(o) : s * (double(o) + 0.5) - 0.5;
    src = std::max(src, 0.0);
    const int64_t i0 = std::min<int64_t>(int64_t(src), in - 1), i1 = std::min<int64_t>(i0 + 1, in - 1);
    const double l1 = std::clamp(src - double(i0), 0.0, 1.0);
    return {{i0, 1 - l1}, {i1, l1}};
  };
  Array out{{x.shape[0], x.shape[1], OH, OW}, std::vector<double>(size_t(P * OH * OW))};
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double total = 0;
        for (auto [h, wh] : taps(oh, H, sh))
          for (auto [w, ww] : taps(ow, W, sw)) total += wh * ww * x.v[size_t((p * H + h) * W + w)];
        out.v[size_t((p * OH + oh) * OW + ow)] = total;
      }
  return out;
}

// group_norm: each image's groups of C / G channels normalised together, then the per-channel affine.
inline Array group_norm(const Array& x, int64_t G, const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const int64_t N = x.shape[0], C = x.shape[1], S = numel(x.shape) / std::max<int64_t>(N * C, 1), D = C / G * S;
  Array out = layer_norm(x, D, {}, {}, eps);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        double& y = out.v[size_t((n * C + c) * S + s)];
        if (!w.empty()) y *= w[size_t(c)];
        if (!b.empty()) y += b[size_t(c)];
      }
  return out;
}

// prelu: x, or a * x for x <= 0, with a per channel (dim 1) or a single a.
inline Array prelu(const Array& x, const std::vector<double>& a) {
  const int64_t C = x.shape.size() >= 2 ? x.shape[1] : 1;
  int64_t S = 1;
  for (size_t d = 2; d < x.shape.size(); ++d) S *= x.shape[d];
  Array out = x;
  for (int64_t k = 0; k < numel(x.shape); ++k) {
    const double slope = a.size() == 1 ? a[0] : a[size_t((k / S) % C)];
    double& y = out.v[size_t(k)];
    y = y > 0 ? y : y * slope;
  }
  return out;
}

}  // namespace ref

// actual (any float dtype) against a reference array, with shape checked by compare().
#define CHECK_MATCHES_REF(actual, expected_array, tolerance) \
  CHECK_CLOSE_WITH((actual), ref::tensor(expected_array), (tolerance))

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// N(0, scale^2) f32 values and positive values in [lo, lo + width), both exactly representable.
inline Tensor normal(hg::Shape shape, double scale = 1.0) { return (hg::randn(std::move(shape)) * scale).detach(); }
inline Tensor positive(hg::Shape shape, double lo = 0.05, double width = 4.0) {
  return (hg::rand(std::move(shape)) * width + lo).detach();
}

// ---- scenario 3: a 16-bit result against f32's ----------------------------------------------------

// Scenario 3's rule, element by element. All three runs start from the same 16-bit-rounded
// inputs. A 16-bit result passes when it is within T(dtype) of the f32 result, or else when it
// is no farther from the f64 truth than the truth rounded to the 16-bit dtype is (no 16-bit
// result can do better; this is the OpInfo `_ref_test_helper` rule). Ops that compute in f32
// and round once meet the first condition with room to spare. Indices must be equal.
inline std::optional<std::string> low_precision_mismatch(const Tensor& actual, const Tensor& ref32, const Tensor& truth) {
  if (actual.shape() != ref32.shape()) {
    std::ostringstream os;
    os << "shape " << actual.shape() << " != " << ref32.shape();
    return os.str();
  }
  const Tolerance tol = hg_test::tolerance_for(actual.dtype());
  const std::vector<double> a = values(actual), r = values(ref32), t = values(truth), best = values(truth.to(actual.dtype()));
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool close = std::fabs(a[i] - r[i]) <= tol.atol + tol.rtol * std::fabs(r[i]);
    const bool as_good_as_rounding = std::fabs(a[i] - t[i]) <= std::fabs(best[i] - t[i]);
    if (close || as_good_as_rounding) continue;
    if (bad++ == 0) first = int64_t(i);
  }
  if (bad == 0) return std::nullopt;
  std::ostringstream os;
  os.precision(9);
  os << bad << " / " << a.size() << " elements fail; first at index " << first << ": " << actual.dtype() << " "
     << a[size_t(first)] << ", f32 " << r[size_t(first)] << ", f64 truth " << t[size_t(first)] << " (rounded to "
     << actual.dtype() << ": " << best[size_t(first)] << ")";
  return os.str();
}

#define CHECK_LOW_PRECISION(actual, ref32, truth)                                                 \
  do {                                                                                            \
    const auto low_report_ = low_precision_mismatch((actual), (ref32), (truth));                  \
    CHECK_MESSAGE(!low_report_.has_value(), low_report_.value_or(""));                            \
  } while (0)
