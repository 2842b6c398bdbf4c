// CUDA softmax and log_softmax: drivers around the formulas of kernels/math/softmax.h, which the CPU
// loops (ops/softmax.cpp) run too. x is contiguous (outer, D, inner). Rows
// (inner == 1) get one warp each, so the three passes read D / 32 values per lane and combine
// with shuffles; other lines get one thread each (adjacent threads read adjacent columns).
// Math is in acc_t<T>: f32 for f32/f16/bf16, f64 for f64, as on the CPU.
#include <cmath>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/softmax.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- kernels --------------------------------------------------------------------------------------

// One warp per contiguous row of length D. The loop bound is the same for the 32 lanes of a warp,
// so every lane reaches each shuffle.
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  const math::Softmax f{log};
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const T* xr = x + row * D;
    T* yr = y + row * D;
    A max = -INFINITY;
    for (int64_t d = lane; d < D; d += kWarp) max = math::nan_max(max, to_acc(xr[d]));
    max = warp_max(max);
    A total = 0;
    for (int64_t d = lane; d < D; d += kWarp) total += f.exp_term(to_acc(xr[d]), max);
    total = warp_sum(total);
    const A log_total = f.log_of(total);
    for (int64_t d = lane; d < D; d += kWarp) yr[d] = from_acc<T>(f.output(to_acc(xr[d]), max, total, log_total));
  }
}

// One thread per (outer, inner) line, walking D with stride `inner`, as a CPU thread does.
template <class T>
__global__ void softmax_lines_kernel(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  using A = acc_t<T>;
  const math::Softmax f{log};
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (line / inner) * D * inner + line % inner;
    A max = -INFINITY;
    for (int64_t d = 0; d < D; ++d) max = math::nan_max(max, to_acc(x[base + d * inner]));
    A total = 0;
    for (int64_t d = 0; d < D; ++d) total += f.exp_term(to_acc(x[base + d * inner]), max);
    const A log_total = f.log_of(total);
    for (int64_t d = 0; d < D; ++d) y[base + d * inner] = from_acc<T>(f.output(to_acc(x[base + d * inner]), max, total, log_total));
  }
}

// Backward from the saved output y:
//   softmax:     dx = y * (g - sum(g * y))
//   log_softmax: dx = g - exp(y) * sum(g)
template <class T>
__global__ void softmax_backward_rows_kernel(const T* y, const T* g, T* dx, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  const math::Softmax f{log};
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const int64_t base = row * D;
    A total = 0;
    for (int64_t d = lane; d < D; d += kWarp) total += f.grad_term(to_acc(g[base + d]), to_acc(y[base + d]));
    total = warp_sum(total);
    for (int64_t d = lane; d < D; d += kWarp) dx[base + d] = from_acc<T>(f.grad(to_acc(g[base + d]), to_acc(y[base + d]), total));
  }
}

template <class T>
__global__ void softmax_backward_lines_kernel(const T* y, const T* g, T* dx, int64_t outer, int64_t D, int64_t inner,
                                              bool log) {
  using A = acc_t<T>;
  const math::Softmax f{log};
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (line / inner) * D * inner + line % inner;
    A total = 0;
    for (int64_t d = 0; d < D; ++d) total += f.grad_term(to_acc(g[base + d * inner]), to_acc(y[base + d * inner]));
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = base + d * inner;
      dx[k] = from_acc<T>(f.grad(to_acc(g[k]), to_acc(y[k]), total));
    }
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t D, int64_t inner, bool log) {
  detail::check_cuda_device(x.device(), "softmax");
  if (outer * inner == 0) return;
  visit_floating(x.dtype(), "softmax", [&]<class T> {
    if (inner == 1) {
      softmax_rows_kernel<T><<<kernels::cuda::blocks_for(outer * kWarp), kernels::cuda::kThreads>>>(
          x.data_ptr<T>(), out.data_ptr<T>(), outer, D, log);
    } else {
      softmax_lines_kernel<T><<<kernels::cuda::blocks_for(outer * inner), kernels::cuda::kThreads>>>(
          x.data_ptr<T>(), out.data_ptr<T>(), outer, D, inner, log);
    }
  });
  HG_CHECK_LAUNCH(inner == 1 ? "softmax_rows_kernel" : "softmax_lines_kernel");
}

void softmax_backward(const Tensor& y, const Tensor& g, const Tensor& dx, int64_t outer, int64_t D, int64_t inner,
                      bool log) {
  detail::check_cuda_device(y.device(), "softmax backward");
  if (outer * inner == 0) return;
  visit_floating(y.dtype(), "softmax backward", [&]<class T> {
    if (inner == 1) {
      softmax_backward_rows_kernel<T><<<kernels::cuda::blocks_for(outer * kWarp), kernels::cuda::kThreads>>>(
          y.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), outer, D, log);
    } else {
      softmax_backward_lines_kernel<T><<<kernels::cuda::blocks_for(outer * inner), kernels::cuda::kThreads>>>(
          y.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), outer, D, inner, log);
    }
  });
  HG_CHECK_LAUNCH(inner == 1 ? "softmax_backward_rows_kernel" : "softmax_backward_lines_kernel");
}

}  // namespace hg::kernels::cuda
