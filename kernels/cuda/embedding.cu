// CUDA embedding, the device side of kernels/embedding.h: the forward gathers rows of the table; the
// backward scatters each gradient row into the row it came from with atomicAdd. Floating-point
// atomics make the summation order (and so the last bits of a row hit twice) vary between runs,
// hence the alert_nondeterministic call. Indices (i64 or i32) are range-checked here rather than
// on the host (which would wait for the GPU): a bad one goes to the device error slot
// (core/cuda/device_error.h), gives a row of zeros and no gradient, and the next synchronisation
// throws "embedding: index 9 at position 3 is out of range".
#include "core/cuda/device_error.h"
#include "core/cuda/device_math.cuh"
#include "core/determinism.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels::cuda {

namespace {

// ---- math -----------------------------------------------------------------------------------------

// *address += value in T's own precision (like the CPU's add_ into a T gradient). The 16-bit
// overloads of atomicAdd exist from sm_70 (half) and sm_80 (bfloat16).
template <class T>
__device__ __forceinline__ void atomic_add(T* address, T value) {
  if constexpr (std::is_same_v<T, half>) {
    atomicAdd(reinterpret_cast<__half*>(address), __ushort_as_half(value.bits));
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(address), __ushort_as_bfloat16(value.bits));
  } else {
    atomicAdd(address, value);
  }
}

// ---- kernels --------------------------------------------------------------------------------------

// out (count, dim) = weight[indices[r], :], one thread per output element. The thread holding
// the first element of a row with a bad index reports it.
template <class T, class I>
__global__ void embedding_forward_kernel(const I* indices, const T* weight, T* out, int64_t count, int64_t dim,
                                         int64_t rows, cuda_detail::DeviceErrorSlot* error) {
  const int64_t n = count * dim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim, d = e % dim;
    const int64_t index = int64_t(indices[r]);
    if (index >= 0 && index < rows) {
      out[e] = weight[index * dim + d];
    } else {
      out[e] = cuda_detail::from_acc<T>(cuda_detail::acc_t<T>(0));
      if (d == 0) cuda_detail::report_device_error(error, cuda_detail::DeviceError::IndexOutOfRange, r, index, rows);
    }
  }
}

template <class T, class I>
__global__ void embedding_backward_kernel(const I* indices, const T* grad, T* grad_weight, int64_t count, int64_t dim,
                                          int64_t rows) {
  const int64_t n = count * dim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / dim, d = e % dim;
    const int64_t index = int64_t(indices[r]);
    if (index >= 0 && index < rows) atomic_add(grad_weight + index * dim + d, grad[e]);
  }
}

// ---- launchers ------------------------------------------------------------------------------------

// f(I) with I the C++ type of the (i64 or i32) index tensor.
template <class F>
void visit_index(const Tensor& indices, F&& f) {
  HG_CHECK(indices.dtype() == i64 || indices.dtype() == i32, "embedding: indices must be i64 (or i32), got ",
           indices.dtype());
  if (indices.dtype() == i64) f.template operator()<int64_t>();
  else f.template operator()<int32_t>();
}

}  // namespace

void embedding_forward(const Tensor& indices, const Tensor& weight, const Tensor& out) {
  detail::check_cuda_device(weight.device(), "embedding");
  const int64_t count = indices.numel(), rows = weight.shape()[0], dim = weight.shape()[1];
  if (count * dim == 0) return;
  visit_dtype(weight.dtype(), [&]<class T> {
    visit_index(indices, [&]<class I> {
      embedding_forward_kernel<T, I><<<kernels::cuda::blocks_for(count * dim), kernels::cuda::kThreads>>>(
          indices.data_ptr<I>(), weight.data_ptr<T>(), out.data_ptr<T>(), count, dim, rows,
          cuda_detail::device_error_slot());
      HG_CHECK_LAUNCH("embedding_forward_kernel");
    });
  });
}

void embedding_backward(const Tensor& indices, const Tensor& grad, const Tensor& grad_weight) {
  detail::alert_nondeterministic("embedding backward on CUDA (atomicAdd)");
  detail::check_cuda_device(grad_weight.device(), "embedding backward");
  const int64_t count = indices.numel(), rows = grad_weight.shape()[0], dim = grad_weight.shape()[1];
  HG_CHECK(grad.is_contiguous() && grad.numel() == count * dim,
           "embedding backward: expected a contiguous gradient of ", count * dim, " elements, got ", grad.shape());
  if (count * dim == 0) return;
  visit_floating(grad_weight.dtype(), "embedding backward", [&]<class T> {
    visit_index(indices, [&]<class I> {
      embedding_backward_kernel<T, I><<<kernels::cuda::blocks_for(count * dim), kernels::cuda::kThreads>>>(
          indices.data_ptr<I>(), grad.data_ptr<T>(), grad_weight.data_ptr<T>(), count, dim, rows);
      HG_CHECK_LAUNCH("embedding_backward_kernel");
    });
  });
}

}  // namespace hg::kernels::cuda
