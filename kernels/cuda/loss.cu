// CUDA cross_entropy: one warp per row of logits (N, C), running the row formulas of
// kernels/math/cross_entropy.h (the CPU loops in kernels/cross_entropy.cpp run the same), in double. The mean over the valid rows is a second, one-block kernel
// that sums the row losses in a fixed order (deterministic) and counts the valid rows on the
// device; the backward reads that count and the incoming gradient from device memory, so neither
// direction waits for the GPU. Targets are checked here, not on the host: a target outside [0, C)
// (and not ignore_index) goes to the device error slot (core/cuda/device_error.h), which the next
// synchronisation turns into "cross_entropy: Target 7 is out of bounds", and its row is ignored.
#include <cmath>

#include "core/cuda/device_error.h"
#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/cross_entropy.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- math -----------------------------------------------------------------------------------------

// log sum exp of one row (kernels/math/cross_entropy.h); every lane of the warp gets the result.
template <class T>
__device__ double row_log_sum_exp(const T* row, int64_t C, int lane) {
  double max = -INFINITY;
  for (int64_t c = lane; c < C; c += kWarp) max = math::nan_max(max, double(to_acc(row[c])));
  max = warp_max(max);
  double total = 0;
  for (int64_t c = lane; c < C; c += kWarp) total += math::CrossEntropy::exp_term(double(to_acc(row[c])), max);
  return math::CrossEntropy::log_sum_exp(max, warp_sum(total));
}

// ---- kernels --------------------------------------------------------------------------------------

// Whether row i's target counts: not ignore_index and inside [0, C).
__device__ __forceinline__ bool counts(int64_t t, int64_t C, int64_t ignore_index) {
  return t != ignore_index && t >= 0 && t < C;
}

// row_loss[i] = the loss of row i, 0 for an ignored (or out-of-range) row. One warp per row
// (warp-uniform loop).
template <class T>
__global__ void cross_entropy_rows_kernel(const T* logits, const int64_t* targets, int64_t N, int64_t C,
                                          double smoothing, int64_t ignore_index, double* row_loss,
                                          cuda_detail::DeviceErrorSlot* error) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; i < N; i += warps) {
    const int64_t t = targets[i];
    if (!counts(t, C, ignore_index)) {
      if (lane == 0) {
        row_loss[i] = 0;
        if (t != ignore_index) cuda_detail::report_device_error(error, cuda_detail::DeviceError::TargetOutOfRange, i, t, C);
      }
      continue;
    }
    const T* row = logits + i * C;
    const double lse = row_log_sum_exp(row, C, lane);
    double row_mean = 0;
    if (smoothing > 0) {
      for (int64_t c = lane; c < C; c += kWarp) row_mean += double(to_acc(row[c])) / double(C);
      row_mean = warp_sum(row_mean);
    }
    if (lane == 0) row_loss[i] = math::CrossEntropy{smoothing, C}.loss(lse, double(to_acc(row[t])), row_mean);
  }
}

// out = sum(row_loss) / valid and valid = the number of rows that count, in one block: each
// thread sums a fixed stride of rows, then a shared-memory tree in a fixed order.
// NOTE: valid == 0 gives 0/0 = NaN, as on the CPU.
template <class T>
__global__ void cross_entropy_mean_kernel(const double* row_loss, const int64_t* targets, int64_t N, int64_t C,
                                          int64_t ignore_index, T* out, int64_t* valid) {
  __shared__ double partial[kernels::cuda::kThreads];
  __shared__ int64_t partial_count[kernels::cuda::kThreads];
  double total = 0;
  int64_t count = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    total += row_loss[i];
    count += counts(targets[i], C, ignore_index);
  }
  partial[threadIdx.x] = total;
  partial_count[threadIdx.x] = count;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) {
      partial[threadIdx.x] += partial[threadIdx.x + step];
      partial_count[threadIdx.x] += partial_count[threadIdx.x + step];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = from_acc<T>(acc_t<T>(partial[0] / double(partial_count[0])));
    *valid = partial_count[0];
  }
}

// grad[i, c] = g / valid * (softmax(x)[c] - target(c)); zeros for a row that does not count.
// `g` (the 0-d incoming gradient) and `valid` are read here rather than on the host.
template <class T, class G>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const G* g, int64_t N,
                                              int64_t C, double smoothing, int64_t ignore_index, const int64_t* valid,
                                              T* grad) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const double scale = double(to_acc(g[0])) / double(*valid);
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; i < N; i += warps) {
    const int64_t t = targets[i];
    T* gr = grad + i * C;
    if (!counts(t, C, ignore_index)) {
      for (int64_t c = lane; c < C; c += kWarp) gr[c] = from_acc<T>(acc_t<T>(0));
      continue;
    }
    const T* row = logits + i * C;
    const double lse = row_log_sum_exp(row, C, lane);
    const math::CrossEntropy f{smoothing, C};
    for (int64_t c = lane; c < C; c += kWarp) gr[c] = from_acc<T>(acc_t<T>(scale * f.grad(double(to_acc(row[c])), lse, c == t)));
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, double label_smoothing, int64_t ignore_index,
                             Tensor& valid) {
  detail::check_cuda_device(logits.device(), "cross_entropy");
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  Tensor out = empty({}, {.dtype = logits.dtype(), .device = logits.device()});
  Tensor row_loss = empty({N}, {.dtype = f64, .device = logits.device()});
  valid = empty({}, {.dtype = i64, .device = logits.device()});
  visit_floating(logits.dtype(), "cross_entropy", [&]<class T> {
    if (N > 0) {
      cross_entropy_rows_kernel<T><<<kernels::cuda::blocks_for(N * kWarp), kernels::cuda::kThreads>>>(
          logits.data_ptr<T>(), targets.data_ptr<int64_t>(), N, C, label_smoothing, ignore_index,
          row_loss.data_ptr<double>(), cuda_detail::device_error_slot());
      HG_CHECK_LAUNCH("cross_entropy_rows_kernel");
    }
    cross_entropy_mean_kernel<T><<<1, kernels::cuda::kThreads>>>(row_loss.data_ptr<double>(), targets.data_ptr<int64_t>(),
                                                               N, C, ignore_index, out.data_ptr<T>(),
                                                               valid.data_ptr<int64_t>());
    HG_CHECK_LAUNCH("cross_entropy_mean_kernel");
  });
  return out;
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_output,
                            double label_smoothing, int64_t ignore_index, const Tensor& valid, const Tensor& grad_logits) {
  detail::check_cuda_device(logits.device(), "cross_entropy backward");
  HG_CHECK(grad_output.numel() == 1 && grad_output.device() == logits.device(),
           "cross_entropy backward: expected a 1-element gradient on ", logits.device(), ", got ", grad_output.shape(),
           " on ", grad_output.device());
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  if (N * C == 0) return;
  visit_floating(logits.dtype(), "cross_entropy backward", [&]<class T> {
    visit_floating(grad_output.dtype(), "cross_entropy backward", [&]<class G> {
      cross_entropy_backward_kernel<T, G><<<kernels::cuda::blocks_for(N * kWarp), kernels::cuda::kThreads>>>(
          logits.data_ptr<T>(), targets.data_ptr<int64_t>(), grad_output.data_ptr<G>(), N, C,
          label_smoothing, ignore_index, valid.data_ptr<int64_t>(), grad_logits.data_ptr<T>());
      HG_CHECK_LAUNCH("cross_entropy_backward_kernel");
    });
  });
}

}  // namespace hg::kernels::cuda
