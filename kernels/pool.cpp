// The pooling kernels: max_pool2d and avg_pool2d (with padding and ceil_mode, PyTorch's rules)
// and adaptive_avg/max_pool2d on a contiguous NCHW tensor, on its device, forward and backward. The
// CPU loops run one task per (n, c) plane and share the window rules (NaN wins a max, which
// elements a window holds, the average's divisor) with the CUDA kernels through
// kernels/math/pool.h; windows that lie inside the input (no padding) take vectorised paths. max_pool2d remembers, per output, which element of its window was the
// maximum: a u8 index (1 byte per output, instead of saving the input, or PyTorch's 8-byte plane
// indices) that the backward uses to route the gradient.
#include "kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/pool.h"

namespace hg::kernels {

namespace {

using math::PoolGeometry;
using math::WindowSpan;

// An element in the type the windows are computed in (float for the 16-bit types).
template <class T>
Acc<T> widen(T v) {
  return Acc<T>(v);
}

// Each output row is built window position by window position, across all its outputs at once:
// the inner loop is a branch-free select over `OW` outputs that the compiler vectorises (the
// common strides 1 and 2 are compile-time constants so the loads need no gathers).
// NOTE: `at` is int32, not uint8: stores through a char type may alias anything, which would
// force the compiler to reload every loop bound after each store (a 4x slower loop).
template <class T, int kStride>
void max_pool_row(const T* top, int64_t W, int64_t OW, int64_t kernel, int64_t stride_runtime, Acc<T>* __restrict best,
                  int32_t* __restrict at) {
  using A = Acc<T>;
  const int64_t stride = kStride > 0 ? kStride : stride_runtime;
  for (int64_t ow = 0; ow < OW; ++ow) best[ow] = A(top[ow * stride]), at[ow] = 0;
  for (int64_t i = 0; i < kernel; ++i)
    for (int64_t j = 0; j < kernel; ++j) {
      if (i == 0 && j == 0) continue;
      const T* row = top + i * W + j;
      const int32_t index = int32_t(i * kernel + j);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const A v = A(row[ow * stride]), b = best[ow];
        const bool take = math::max_pool_takes(b, v);
        best[ow] = take ? v : b;
        at[ow] = take ? index : at[ow];
      }
    }
}

// The 2x2, stride-2 pool of every CNN, with the SIMD row kernel of kernels/cpu/pool.h: both
// rows of each window at once. 16-bit rows are widened, pooled and rounded back (exact: max
// picks an input).
template <class T>
void max_pool_2x2(const T* x, T* y, uint8_t* where, const PoolGeometry& g, int64_t lo, int64_t hi) {
  std::vector<float> rows(std::is_same_v<T, float> ? 0 : static_cast<size_t>(2 * g.W)),
      out(std::is_same_v<T, float> ? 0 : static_cast<size_t>(g.OW));
  for (int64_t p = lo; p < hi; ++p)
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const T* r0 = x + (p * g.H + 2 * oh) * g.W;
      T* yo = y + (p * g.OH + oh) * g.OW;
      uint8_t* wo = where + (p * g.OH + oh) * g.OW;
      if constexpr (std::is_same_v<T, float>) {
        cpu::max_pool_2x2_row(r0, r0 + g.W, yo, wo, g.OW);
      } else {
        convert_to_float(r0, rows.data(), size_t(2 * g.W));
        cpu::max_pool_2x2_row(rows.data(), rows.data() + g.W, out.data(), wo, g.OW);
        convert_from_float(out.data(), yo, size_t(g.OW));
      }
    }
}

// Windows that reach into the padding (or past the input, ceil_mode): each output scans the part
// of its window inside the input. The window index counts from the window's corner, padding
// included, so the backward needs no other geometry.
template <class T>
void max_pool_forward_clipped(const T* x, T* y, uint8_t* where, const PoolGeometry& g) {
  using A = Acc<T>;
  parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const T* plane = x + p * g.H * g.W;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const WindowSpan rows = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const WindowSpan cols = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
          const math::WindowMax<A> m = math::window_max<A>(plane, g.W, g.kernel, rows, cols, widen<T>);
          const int64_t out = (p * g.OH + oh) * g.OW + ow;
          y[out] = T(m.best);
          where[out] = uint8_t(m.at);
        }
      }
    }
  });
}

template <class T>
void max_pool_forward(const T* x, T* y, uint8_t* where, const PoolGeometry& g) {
  using A = Acc<T>;
  if (!math::windows_inside(g)) return max_pool_forward_clipped(x, y, where, g);
  if constexpr (!std::is_same_v<T, double>) {  // (f64 takes the general path)
    if (g.kernel == 2 && g.stride == 2) {
      parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) { max_pool_2x2<T>(x, y, where, g, lo, hi); });
      return;
    }
  }
  parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) {
    std::vector<A> best(static_cast<size_t>(g.OW));
    std::vector<int32_t> at(static_cast<size_t>(g.OW));
    for (int64_t p = lo; p < hi; ++p) {
      const T* plane = x + p * g.H * g.W;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const T* top = plane + oh * g.stride * g.W;
        if (g.stride == 2) max_pool_row<T, 2>(top, g.W, g.OW, g.kernel, 2, best.data(), at.data());
        else if (g.stride == 1) max_pool_row<T, 1>(top, g.W, g.OW, g.kernel, 1, best.data(), at.data());
        else max_pool_row<T, 0>(top, g.W, g.OW, g.kernel, g.stride, best.data(), at.data());
        const int64_t out = (p * g.OH + oh) * g.OW;
        for (int64_t ow = 0; ow < g.OW; ++ow) y[out + ow] = T(best[size_t(ow)]), where[out + ow] = uint8_t(at[size_t(ow)]);
      }
    }
  });
}

template <class T>
void max_pool_backward(const T* grad, const uint8_t* where, T* dx, const PoolGeometry& g) {
  using A = Acc<T>;
  // Where each window index lands in the plane, relative to the window's corner: a table, not a
  // division and a modulo per element.
  std::vector<int64_t> offset(static_cast<size_t>(g.kernel * g.kernel));
  for (int64_t at = 0; at < g.kernel * g.kernel; ++at) offset[size_t(at)] = at / g.kernel * g.W + at % g.kernel;
  const int64_t out_plane = g.OH * g.OW, in_plane = g.H * g.W;
  constexpr bool widen = !std::is_same_v<T, A>;
  parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) {
    // 16-bit: gradients widened and rounded back in bulk (SIMD), not one value at a time; f32 and
    // f64 are summed straight into dx.
    std::vector<A> wide_plane(widen ? size_t(in_plane) : 0), wide_grad(widen ? size_t(out_plane) : 0);
    for (int64_t p = lo; p < hi; ++p) {
      const A* g_p = nullptr;
      A* plane = nullptr;
      if constexpr (widen) {
        convert_to_float(grad + p * out_plane, wide_grad.data(), size_t(out_plane));
        g_p = wide_grad.data();
        plane = wide_plane.data();
      } else {
        g_p = grad + p * out_plane;
        plane = dx + p * in_plane;
      }
      const uint8_t* w_p = where + p * out_plane;
      std::fill(plane, plane + in_plane, A(0));
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t out = oh * g.OW + ow;
          // The window's corner may lie in the padding; the maximum itself never does.
          plane[(oh * g.stride - g.padding) * g.W + ow * g.stride - g.padding + offset[w_p[out]]] += g_p[out];
        }
      if constexpr (widen) convert_from_float(wide_plane.data(), dx + p * in_plane, size_t(in_plane));
    }
  });
}

// Each output averages the part of its window inside the input, divided by what
// math::avg_pool_count says (kernel^2 inside the input).
template <class T>
void avg_pool_forward(const T* x, T* y, const PoolGeometry& g) {
  using A = Acc<T>;
  parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const WindowSpan rows = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const WindowSpan cols = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
          const A total = math::window_sum<A>(x + p * g.H * g.W, g.W, rows.begin, rows.end, cols.begin, cols.end, widen<T>);
          y[(p * g.OH + oh) * g.OW + ow] = T(total * math::avg_pool_weight<A>(math::avg_pool_count(rows, cols, g.count_include_pad)));
        }
      }
  });
}

template <class T>
void avg_pool_backward(const T* grad, T* dx, const PoolGeometry& g) {
  using A = Acc<T>;
  parallel_for(0, g.planes, grain_for(g.H * g.W), [&](int64_t lo, int64_t hi) {
    std::vector<A> plane(static_cast<size_t>(g.H * g.W));
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(plane.begin(), plane.end(), A(0));
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const WindowSpan rows = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const WindowSpan cols = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
          const A share = A(grad[(p * g.OH + oh) * g.OW + ow]) *
                          math::avg_pool_weight<A>(math::avg_pool_count(rows, cols, g.count_include_pad));
          for (int64_t h = rows.begin; h < rows.end; ++h)
            for (int64_t w = cols.begin; w < cols.end; ++w) plane[size_t(h * g.W + w)] += share;
        }
      }
      for (int64_t k = 0; k < g.H * g.W; ++k) dx[p * g.H * g.W + k] = T(plane[size_t(k)]);
    }
  });
}

// adaptive_avg_pool2d: the mean of each bin; the backward spreads grad / bin size over the bin.
template <class T>
void adaptive_avg_forward(const T* x, T* y, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  using A = Acc<T>;
  parallel_for(0, planes, grain_for(H * W), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = math::adaptive_begin(oh, H, OH), h1 = math::adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = math::adaptive_begin(ow, W, OW), w1 = math::adaptive_end(ow, W, OW);
          const A total = math::window_sum<A>(x + p * H * W, W, h0, h1, w0, w1, widen<T>);
          y[(p * OH + oh) * OW + ow] = T(total * math::avg_pool_weight<A>((h1 - h0) * (w1 - w0)));
        }
      }
  });
}

template <class T>
void adaptive_avg_backward(const T* grad, T* dx, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  using A = Acc<T>;
  parallel_for(0, planes, grain_for(H * W), [&](int64_t lo, int64_t hi) {
    std::vector<A> plane(static_cast<size_t>(H * W));
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(plane.begin(), plane.end(), A(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = math::adaptive_begin(oh, H, OH), h1 = math::adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = math::adaptive_begin(ow, W, OW), w1 = math::adaptive_end(ow, W, OW);
          const A share = A(grad[(p * OH + oh) * OW + ow]) * math::avg_pool_weight<A>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) plane[size_t(h * W + w)] += share;
        }
      }
      for (int64_t k = 0; k < H * W; ++k) dx[p * H * W + k] = T(plane[size_t(k)]);
    }
  });
}

// adaptive_max_pool2d: the maximum of each bin and its plane index; the backward adds each
// output's gradient at its index (bins may overlap: an element can take several).
template <class T>
void adaptive_max_forward(const T* x, T* y, int64_t* where, int64_t planes, int64_t H, int64_t W, int64_t OH,
                          int64_t OW) {
  using A = Acc<T>;
  parallel_for(0, planes, grain_for(H * W), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = math::adaptive_begin(oh, H, OH), h1 = math::adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = math::adaptive_begin(ow, W, OW), w1 = math::adaptive_end(ow, W, OW);
          const math::WindowMax<A> m = math::bin_max<A>(x + p * H * W, W, h0, h1, w0, w1, widen<T>);
          y[(p * OH + oh) * OW + ow] = T(m.best);
          where[(p * OH + oh) * OW + ow] = m.at;
        }
      }
  });
}

template <class T>
void adaptive_max_backward(const T* grad, const int64_t* where, T* dx, int64_t planes, int64_t H, int64_t W,
                           int64_t OHW) {
  using A = Acc<T>;
  parallel_for(0, planes, grain_for(H * W), [&](int64_t lo, int64_t hi) {
    std::vector<A> plane(static_cast<size_t>(H * W));
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(plane.begin(), plane.end(), A(0));
      for (int64_t o = 0; o < OHW; ++o) plane[size_t(where[p * OHW + o])] += A(grad[p * OHW + o]);
      for (int64_t k = 0; k < H * W; ++k) dx[p * H * W + k] = T(plane[size_t(k)]);
    }
  });
}

}  // namespace

MaxPoolResult max_pool2d(const Tensor& x, const PoolGeometry& g) {
  MaxPoolResult r{empty({x.shape()[0], x.shape()[1], g.OH, g.OW}, x.options()), Tensor()};
  r.where = empty(r.out.shape(), {.dtype = u8, .device = x.device()});
  if (r.out.numel() == 0) return r;
  if (x.device().is_cuda()) {
    kernels::cuda::max_pool2d_forward(x, r.out, r.where, g);
  } else {
    visit_floating(x.dtype(), "max_pool2d", [&]<class T> {
      max_pool_forward<T>(x.data_ptr<T>(), r.out.data_ptr<T>(), r.where.data_ptr<uint8_t>(), g);
    });
  }
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& where, const Shape& x_shape, const PoolGeometry& g) {
  Tensor dx = empty(x_shape, grad.options());
  if (dx.numel() == 0) return dx;
  if (dx.device().is_cuda()) {
    kernels::cuda::max_pool2d_backward(grad, where, dx, g);
  } else {
    visit_floating(grad.dtype(), "max_pool2d", [&]<class T> {
      max_pool_backward<T>(grad.data_ptr<T>(), where.data_ptr<uint8_t>(), dx.data_ptr<T>(), g);
    });
  }
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const PoolGeometry& g) {
  Tensor out = empty({x.shape()[0], x.shape()[1], g.OH, g.OW}, x.options());
  if (out.numel() == 0) return out;
  if (x.device().is_cuda()) {
    kernels::cuda::avg_pool2d_forward(x, out, g);
  } else {
    visit_floating(x.dtype(), "avg_pool2d", [&]<class T> { avg_pool_forward<T>(x.data_ptr<T>(), out.data_ptr<T>(), g); });
  }
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad, const Shape& x_shape, const PoolGeometry& g) {
  Tensor dx = empty(x_shape, grad.options());
  if (dx.numel() == 0) return dx;
  if (dx.device().is_cuda()) {
    kernels::cuda::avg_pool2d_backward(grad, dx, g);
  } else {
    visit_floating(grad.dtype(), "avg_pool2d", [&]<class T> { avg_pool_backward<T>(grad.data_ptr<T>(), dx.data_ptr<T>(), g); });
  }
  return dx;
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t OH, int64_t OW) {
  const Shape& s = x.shape();
  Tensor out = empty({s[0], s[1], OH, OW}, x.options());
  if (out.numel() == 0) return out;
  if (x.device().is_cuda()) {
    kernels::cuda::adaptive_avg_pool2d_forward(x, out);
  } else {
    visit_floating(x.dtype(), "adaptive_avg_pool2d", [&]<class T> {
      adaptive_avg_forward<T>(x.data_ptr<T>(), out.data_ptr<T>(), s[0] * s[1], s[2], s[3], OH, OW);
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& x_shape) {
  Tensor dx = empty(x_shape, grad.options());
  if (dx.numel() == 0) return dx;
  if (dx.device().is_cuda()) {
    kernels::cuda::adaptive_avg_pool2d_backward(grad, dx);
  } else {
    visit_floating(grad.dtype(), "adaptive_avg_pool2d", [&]<class T> {
      adaptive_avg_backward<T>(grad.data_ptr<T>(), dx.data_ptr<T>(), x_shape[0] * x_shape[1], x_shape[2], x_shape[3],
                               grad.shape()[2], grad.shape()[3]);
    });
  }
  return dx;
}

MaxPoolResult adaptive_max_pool2d(const Tensor& x, int64_t OH, int64_t OW) {
  const Shape& s = x.shape();
  MaxPoolResult r{empty({s[0], s[1], OH, OW}, x.options()), empty({s[0], s[1], OH, OW}, {.dtype = i64, .device = x.device()})};
  if (r.out.numel() == 0) return r;
  if (x.device().is_cuda()) {
    kernels::cuda::adaptive_max_pool2d_forward(x, r.out, r.where);
  } else {
    visit_floating(x.dtype(), "adaptive_max_pool2d", [&]<class T> {
      adaptive_max_forward<T>(x.data_ptr<T>(), r.out.data_ptr<T>(), r.where.data_ptr<int64_t>(), s[0] * s[1], s[2], s[3],
                              OH, OW);
    });
  }
  return r;
}

Tensor adaptive_max_pool2d_backward(const Tensor& grad, const Tensor& where, const Shape& x_shape) {
  Tensor dx = empty(x_shape, grad.options());
  if (dx.numel() == 0) return dx;
  if (dx.device().is_cuda()) {
    kernels::cuda::adaptive_max_pool2d_backward(grad, where, dx);
  } else {
    visit_floating(grad.dtype(), "adaptive_max_pool2d", [&]<class T> {
      adaptive_max_backward<T>(grad.data_ptr<T>(), where.data_ptr<int64_t>(), dx.data_ptr<T>(), x_shape[0] * x_shape[1],
                               x_shape[2], x_shape[3], grad.shape()[2] * grad.shape()[3]);
    });
  }
  return dx;
}

}  // namespace hg::kernels
