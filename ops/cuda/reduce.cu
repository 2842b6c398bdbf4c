// CUDA reductions: one block per output element; the block's threads stride over the reduced
// axis and combine in shared memory in a fixed order, so results are deterministic. Sums
// accumulate in double (as on the CPU); max/argmax propagate NaN and keep the first maximum.
#include <cfloat>

#include "core/cuda/device_math.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda_ops.h"

namespace hg::cuda_ops {

namespace {

using cuda_detail::acc_t;
using cuda_detail::to_acc;

template <class T, class U>
__global__ void sum_kernel(const T* x, U* out, int64_t R, int64_t inner, bool mean) {
  __shared__ double partial[cuda_detail::kThreads];
  const int64_t o = blockIdx.x / inner, i = blockIdx.x % inner;
  double acc = 0;
  for (int64_t r = threadIdx.x; r < R; r += blockDim.x) acc += double(to_acc(x[(o * R + r) * inner + i]));
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double total = mean ? partial[0] / double(R) : partial[0];
    out[blockIdx.x] = cuda_detail::from_acc<U>(acc_t<U>(total));
  }
}

// (value, index) with "NaN is the largest, then the first index wins".
template <class A>
__device__ __forceinline__ bool better(A v, int64_t vi, A best, int64_t bi) {
  const bool v_nan = v != v, b_nan = best != best;
  if (v_nan != b_nan) return v_nan;
  if (!v_nan && v != best) return v > best;
  return vi < bi;
}

template <class T>
__global__ void max_kernel(const T* x, T* values, int64_t* indices, int64_t R, int64_t inner) {
  using A = acc_t<T>;
  __shared__ A best_value[cuda_detail::kThreads];
  __shared__ int64_t best_index[cuda_detail::kThreads];
  const int64_t o = blockIdx.x / inner, i = blockIdx.x % inner;
  A best = to_acc(x[o * R * inner + i]);
  int64_t bi = 0;
  for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
    const A v = to_acc(x[(o * R + r) * inner + i]);
    if (better(v, r, best, bi)) best = v, bi = r;
  }
  best_value[threadIdx.x] = best;
  best_index[threadIdx.x] = bi;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step &&
        better(best_value[threadIdx.x + step], best_index[threadIdx.x + step], best_value[threadIdx.x], best_index[threadIdx.x])) {
      best_value[threadIdx.x] = best_value[threadIdx.x + step];
      best_index[threadIdx.x] = best_index[threadIdx.x + step];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (values) values[blockIdx.x] = cuda_detail::from_acc<T>(best_value[0]);
    if (indices) indices[blockIdx.x] = best_index[0];
  }
}

}  // namespace

void reduce(ReduceKind kind, const Tensor& x, const Tensor& out, int64_t outer, int64_t R, int64_t inner) {
  detail::check_cuda_device(x.device(), "reduce");
  const int64_t outputs = outer * inner;
  HG_CHECK(outputs < (int64_t(1) << 31), "reduce: too many outputs for one CUDA grid (", outputs, ")");
  const int blocks = int(outputs);
  visit_dtype(x.dtype(), [&]<class T> {
    if (kind == ReduceKind::Sum || kind == ReduceKind::Mean) {
      visit_dtype(out.dtype(), [&]<class U> {
        sum_kernel<T, U><<<blocks, cuda_detail::kThreads>>>(x.data_ptr<T>(), out.data_ptr<U>(), R, inner,
                                                            kind == ReduceKind::Mean);
      });
    } else {
      const bool argmax = kind == ReduceKind::ArgMax;
      max_kernel<T><<<blocks, cuda_detail::kThreads>>>(x.data_ptr<T>(), argmax ? nullptr : out.data_ptr<T>(),
                                                       argmax ? out.data_ptr<int64_t>() : nullptr, R, inner);
    }
  });
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hg::cuda_ops
