// CUDA max_pool2d and avg_pool2d (padding and ceil_mode included) and adaptive_avg_pool2d, the
// device side of kernels/pool.h on contiguous NCHW tensors. The forwards give each output its own
// thread. The backwards give each *input* element its own thread, which gathers from the windows
// that contain it (in the CPU's window order), so overlapping windows (stride < kernel) need no
// atomics and the result is deterministic -- and bitwise the CPU's, which adds the same values in
// the same order.
#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/pool.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- math -----------------------------------------------------------------------------------------

using math::PoolGeometry;

// The windows that contain input row (or column) h: oh in [first, last], those whose window
// [oh * stride - padding, oh * stride - padding + kernel) holds h, clipped to [0, OH).
struct WindowRange {
  int64_t first, last;
};

__device__ __forceinline__ WindowRange windows_containing(int64_t h, int64_t OH, int64_t kernel, int64_t stride,
                                                          int64_t padding) {
  const int64_t hp = h + padding;  // in the padded input's coordinates
  const int64_t first = hp < kernel ? 0 : (hp - kernel) / stride + 1;
  const int64_t last = min(hp / stride, OH - 1);
  return {first, last};
}

// a * b, never fused into a following add (nvcc contracts a * b + c into one FMA by default): the
// backward adds the same rounded shares as the CPU.
template <class A>
__device__ __forceinline__ A mul_rn(A a, A b) {
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
}

// An element in the type the windows are computed in, the device's conversion.
struct Widen {
  template <class T>
  __device__ __forceinline__ acc_t<T> operator()(T v) const {
    return to_acc(v);
  }
};

// ---- kernels --------------------------------------------------------------------------------------

// Each output scans the part of its window inside the input row by row; the first element starts
// as the best and a later one replaces it only if larger, or NaN while the best is not: NaN wins,
// then the first maximum (math::max_pool_takes, as on the CPU). `where` is the winner's index in
// the window counted from its corner, padding included: (h - start) * kernel + (w - start).
template <class T>
__global__ void max_pool_forward_kernel(const T* x, T* y, uint8_t* where, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.OH * g.OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.OW, oh = (o / g.OW) % g.OH, p = o / (g.OW * g.OH);
    const math::WindowSpan rows = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
    const math::WindowSpan cols = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
    const math::WindowMax<A> m = math::window_max<A>(x + p * g.H * g.W, g.W, g.kernel, rows, cols, Widen{});
    y[o] = from_acc<T>(m.best);
    where[o] = uint8_t(m.at);
  }
}

// dx at (p, h, w) = the sum of grad over the windows whose recorded maximum is (h, w).
template <class T>
__global__ void max_pool_backward_kernel(const T* grad, const uint8_t* where, T* dx, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H);
    const WindowRange rows = windows_containing(h, g.OH, g.kernel, g.stride, g.padding);
    const WindowRange cols = windows_containing(w, g.OW, g.kernel, g.stride, g.padding);
    A total = 0;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow) {
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        const int64_t at = (h - (oh * g.stride - g.padding)) * g.kernel + (w - (ow * g.stride - g.padding));
        if (int64_t(where[o]) == at) total += to_acc(grad[o]);
      }
    dx[e] = from_acc<T>(total);
  }
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.OH * g.OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.OW, oh = (o / g.OW) % g.OH, p = o / (g.OW * g.OH);
    const math::WindowSpan rows = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
    const math::WindowSpan cols = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
    const A total = math::window_sum<A>(x + p * g.H * g.W, g.W, rows.begin, rows.end, cols.begin, cols.end, Widen{});
    y[o] = from_acc<T>(mul_rn(total, math::avg_pool_weight<A>(math::avg_pool_count(rows, cols, g.count_include_pad))));
  }
}

// dx at (p, h, w) = the sum over the windows containing it of grad / (the window's count).
template <class T>
__global__ void avg_pool_backward_kernel(const T* grad, T* dx, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H);
    const WindowRange rows = windows_containing(h, g.OH, g.kernel, g.stride, g.padding);
    const WindowRange cols = windows_containing(w, g.OW, g.kernel, g.stride, g.padding);
    A total = 0;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow) {
        const math::WindowSpan rs = math::window_span(oh, g.H, g.kernel, g.stride, g.padding);
        const math::WindowSpan cs = math::window_span(ow, g.W, g.kernel, g.stride, g.padding);
        const A weight = math::avg_pool_weight<A>(math::avg_pool_count(rs, cs, g.count_include_pad));
        total += mul_rn(to_acc(grad[(p * g.OH + oh) * g.OW + ow]), weight);
      }
    dx[e] = from_acc<T>(total);
  }
}

// adaptive_avg_pool2d: each output the mean of its bin (math::adaptive_begin/end).
template <class T>
__global__ void adaptive_avg_forward_kernel(const T* x, T* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                            int64_t OW) {
  using A = acc_t<T>;
  const int64_t n = planes * OH * OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, p = o / (OW * OH);
    const int64_t h0 = math::adaptive_begin(oh, H, OH), h1 = math::adaptive_end(oh, H, OH);
    const int64_t w0 = math::adaptive_begin(ow, W, OW), w1 = math::adaptive_end(ow, W, OW);
    const A total = math::window_sum<A>(x + p * H * W, W, h0, h1, w0, w1, Widen{});
    y[o] = from_acc<T>(mul_rn(total, math::avg_pool_weight<A>((h1 - h0) * (w1 - w0))));
  }
}

// dx at (p, h, w): the bins containing it, in the CPU's order, each giving grad / its size.
template <class T>
__global__ void adaptive_avg_backward_kernel(const T* grad, T* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                             int64_t OW) {
  using A = acc_t<T>;
  const int64_t n = planes * H * W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, p = e / (W * H);
    A total = 0;
    for (int64_t oh = math::adaptive_first_bin(h, H, OH); oh <= math::adaptive_last_bin(h, H, OH); ++oh)
      for (int64_t ow = math::adaptive_first_bin(w, W, OW); ow <= math::adaptive_last_bin(w, W, OW); ++ow) {
        const int64_t count = (math::adaptive_end(oh, H, OH) - math::adaptive_begin(oh, H, OH)) *
                              (math::adaptive_end(ow, W, OW) - math::adaptive_begin(ow, W, OW));
        total += mul_rn(to_acc(grad[(p * OH + oh) * OW + ow]), math::avg_pool_weight<A>(count));
      }
    dx[e] = from_acc<T>(total);
  }
}

// adaptive_max_pool2d: each output the maximum of its bin and its plane index.
template <class T>
__global__ void adaptive_max_forward_kernel(const T* x, T* y, int64_t* where, int64_t planes, int64_t H, int64_t W,
                                            int64_t OH, int64_t OW) {
  using A = acc_t<T>;
  const int64_t n = planes * OH * OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, p = o / (OW * OH);
    const int64_t h0 = math::adaptive_begin(oh, H, OH), h1 = math::adaptive_end(oh, H, OH);
    const int64_t w0 = math::adaptive_begin(ow, W, OW), w1 = math::adaptive_end(ow, W, OW);
    const math::WindowMax<A> m = math::bin_max<A>(x + p * H * W, W, h0, h1, w0, w1, Widen{});
    y[o] = from_acc<T>(m.best);
    where[o] = m.at;
  }
}

// dx at (p, h, w): the gradients of the bins whose maximum it is, in the CPU's order (no atomics).
template <class T>
__global__ void adaptive_max_backward_kernel(const T* grad, const int64_t* where, T* dx, int64_t planes, int64_t H,
                                             int64_t W, int64_t OH, int64_t OW) {
  using A = acc_t<T>;
  const int64_t n = planes * H * W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, p = e / (W * H);
    A total = 0;
    for (int64_t oh = math::adaptive_first_bin(h, H, OH); oh <= math::adaptive_last_bin(h, H, OH); ++oh)
      for (int64_t ow = math::adaptive_first_bin(w, W, OW); ow <= math::adaptive_last_bin(w, W, OW); ++ow) {
        const int64_t o = (p * OH + oh) * OW + ow;
        if (where[o] == h * W + w) total += to_acc(grad[o]);
      }
    dx[e] = from_acc<T>(total);
  }
}

// ---- launchers ------------------------------------------------------------------------------------

void check_4d(const Tensor& input, const Tensor& output) {
  HG_CHECK(input.dim() == 4 && output.dim() == 4 && input.is_contiguous() && output.is_contiguous(),
           "pool2d: expected contiguous 4-D tensors, got ", input.shape(), " and ", output.shape());
}

}  // namespace

void max_pool2d_forward(const Tensor& x, const Tensor& out, const Tensor& where, const math::PoolGeometry& g) {
  check_4d(x, out);
  launch_per_element("max_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    max_pool_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(),
                                                                  where.data_ptr<uint8_t>(), g);
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& where, const Tensor& grad_x, const math::PoolGeometry& g) {
  check_4d(grad_x, grad);
  launch_per_element("max_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    max_pool_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), where.data_ptr<uint8_t>(),
                                                                   grad_x.data_ptr<T>(), g);
  });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& out, const math::PoolGeometry& g) {
  check_4d(x, out);
  launch_per_element("avg_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    avg_pool_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(), g);
  });
}

void avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x, const math::PoolGeometry& g) {
  check_4d(grad_x, grad);
  launch_per_element("avg_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    avg_pool_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), grad_x.data_ptr<T>(), g);
  });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& out) {
  check_4d(x, out);
  const Shape& s = x.shape();
  launch_per_element("adaptive_avg_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    adaptive_avg_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(), s[0] * s[1],
                                                                      s[2], s[3], out.shape()[2], out.shape()[3]);
  });
}

void adaptive_avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x) {
  check_4d(grad_x, grad);
  const Shape& s = grad_x.shape();
  launch_per_element("adaptive_avg_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    adaptive_avg_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), grad_x.data_ptr<T>(),
                                                                       s[0] * s[1], s[2], s[3], grad.shape()[2],
                                                                       grad.shape()[3]);
  });
}

void adaptive_max_pool2d_forward(const Tensor& x, const Tensor& out, const Tensor& where) {
  check_4d(x, out);
  const Shape& s = x.shape();
  launch_per_element("adaptive_max_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    adaptive_max_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(),
                                                                      where.data_ptr<int64_t>(), s[0] * s[1], s[2],
                                                                      s[3], out.shape()[2], out.shape()[3]);
  });
}

void adaptive_max_pool2d_backward(const Tensor& grad, const Tensor& where, const Tensor& grad_x) {
  check_4d(grad_x, grad);
  const Shape& s = grad_x.shape();
  launch_per_element("adaptive_max_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    adaptive_max_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), where.data_ptr<int64_t>(),
                                                                       grad_x.data_ptr<T>(), s[0] * s[1], s[2], s[3],
                                                                       grad.shape()[2], grad.shape()[3]);
  });
}

}  // namespace hg::kernels::cuda
