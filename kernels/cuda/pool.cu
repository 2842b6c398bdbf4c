// CUDA max_pool2d and avg_pool2d (no padding), the device side of kernels/pool.h on contiguous
// NCHW tensors. The forwards give each output its own thread. The backwards give each *input* element
// its own thread, which gathers from the windows that contain it (in the CPU's window order), so
// overlapping windows (stride < kernel) need no atomics and the result is deterministic -- and
// bitwise the CPU's, which adds the same values in the same order.
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

// The windows that contain row (or column) h: oh in [first, last], those with
// oh * stride <= h < oh * stride + kernel, clipped to [0, OH).
struct WindowRange {
  int64_t first, last;
};

__device__ __forceinline__ WindowRange windows_containing(int64_t h, int64_t OH, int64_t kernel, int64_t stride) {
  const int64_t first = h < kernel ? 0 : (h - kernel) / stride + 1;
  const int64_t last = min(h / stride, OH - 1);
  return {first, last};
}

// a * b, never fused into a following add (nvcc contracts a * b + c into one FMA by default): the
// backward adds the same rounded shares as the CPU.
template <class A>
__device__ __forceinline__ A mul_rn(A a, A b) {
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
}

// ---- kernels --------------------------------------------------------------------------------------

// Each output scans its window row by row; the first element starts as the best and a later one
// replaces it only if larger, or NaN while the best is not: NaN wins, then the first maximum
// (math::max_pool_takes, as on the CPU). `where` is the winner's index in the window, i * kernel + j.
template <class T>
__global__ void max_pool_forward_kernel(const T* x, T* y, uint8_t* where, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.OH * g.OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.OW, oh = (o / g.OW) % g.OH, p = o / (g.OW * g.OH);
    const T* top = x + (p * g.H + oh * g.stride) * g.W + ow * g.stride;
    A best = to_acc(top[0]);
    int at = 0;
    for (int i = 0; i < g.kernel; ++i)
      for (int j = 0; j < g.kernel; ++j) {
        const A v = to_acc(top[i * g.W + j]);
        if (math::max_pool_takes(best, v)) best = v, at = i * g.kernel + j;
      }
    y[o] = from_acc<T>(best);
    where[o] = uint8_t(at);
  }
}

// dx at (p, h, w) = the sum of grad over the windows whose recorded maximum is (h, w).
template <class T>
__global__ void max_pool_backward_kernel(const T* grad, const uint8_t* where, T* dx, PoolGeometry g) {
  using A = acc_t<T>;
  const int64_t n = g.planes * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H);
    const WindowRange rows = windows_containing(h, g.OH, g.kernel, g.stride);
    const WindowRange cols = windows_containing(w, g.OW, g.kernel, g.stride);
    A total = 0;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow) {
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        if (int64_t(where[o]) == (h - oh * g.stride) * g.kernel + (w - ow * g.stride)) total += to_acc(grad[o]);
      }
    dx[e] = from_acc<T>(total);
  }
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, PoolGeometry g) {
  using A = acc_t<T>;
  const A inv = math::avg_pool_weight<A>(g.kernel);
  const int64_t n = g.planes * g.OH * g.OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.OW, oh = (o / g.OW) % g.OH, p = o / (g.OW * g.OH);
    const T* top = x + (p * g.H + oh * g.stride) * g.W + ow * g.stride;
    A total = 0;
    for (int i = 0; i < g.kernel; ++i)
      for (int j = 0; j < g.kernel; ++j) total += to_acc(top[i * g.W + j]);
    y[o] = from_acc<T>(total * inv);
  }
}

// dx at (p, h, w) = the sum over the windows containing it of grad / kernel^2.
template <class T>
__global__ void avg_pool_backward_kernel(const T* grad, T* dx, PoolGeometry g) {
  using A = acc_t<T>;
  const A inv = math::avg_pool_weight<A>(g.kernel);
  const int64_t n = g.planes * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, p = e / (g.W * g.H);
    const WindowRange rows = windows_containing(h, g.OH, g.kernel, g.stride);
    const WindowRange cols = windows_containing(w, g.OW, g.kernel, g.stride);
    A total = 0;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow)
        total += mul_rn(to_acc(grad[(p * g.OH + oh) * g.OW + ow]), inv);
    dx[e] = from_acc<T>(total);
  }
}

// ---- launchers ------------------------------------------------------------------------------------

// input (N, C, H, W), output (N, C, OH, OW).
PoolGeometry geometry(const Tensor& input, const Tensor& output, int kernel, int stride) {
  HG_CHECK(input.dim() == 4 && output.dim() == 4 && input.is_contiguous() && output.is_contiguous(),
           "pool2d: expected contiguous 4-D tensors, got ", input.shape(), " and ", output.shape());
  const Shape& x = input.shape();
  return math::pool_geometry(x[0], x[1], x[2], x[3], kernel, stride);
}

// The four entry points differ only in their kernel: check the device, skip empty work, launch
// one thread per element of `elements` for `on`'s dtype, check the launch.
template <class Launch>
void launch_per_element(const char* op, const Tensor& on, int64_t elements, const Launch& launch) {
  detail::check_cuda_device(on.device(), op);
  if (elements == 0) return;
  visit_floating(on.dtype(), op, [&]<class T> { launch.template operator()<T>(kernels::cuda::blocks_for(elements)); });
  HG_CHECK_LAUNCH(op);  // the kernels are named after their op
}

}  // namespace

void max_pool2d_forward(const Tensor& x, const Tensor& out, const Tensor& where, int kernel, int stride) {
  const PoolGeometry g = geometry(x, out, kernel, stride);
  launch_per_element("max_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    max_pool_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(),
                                                                  where.data_ptr<uint8_t>(), g);
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& where, const Tensor& grad_x, int kernel, int stride) {
  const PoolGeometry g = geometry(grad_x, grad, kernel, stride);
  launch_per_element("max_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    max_pool_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), where.data_ptr<uint8_t>(),
                                                                   grad_x.data_ptr<T>(), g);
  });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& out, int kernel, int stride) {
  const PoolGeometry g = geometry(x, out, kernel, stride);
  launch_per_element("avg_pool2d", x, out.numel(), [&]<class T>(int blocks) {
    avg_pool_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(), g);
  });
}

void avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x, int kernel, int stride) {
  const PoolGeometry g = geometry(grad_x, grad, kernel, stride);
  launch_per_element("avg_pool2d backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    avg_pool_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), grad_x.data_ptr<T>(), g);
  });
}

}  // namespace hg::kernels::cuda
