// CUDA dropout: the rule of kernels/math/dropout.h (which the CPU loop runs too), one thread per
// Philox block of 4 elements.
#include "core/cuda/device_math.cuh"
#include "core/philox.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/dropout.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- kernels --------------------------------------------------------------------------------------

// One thread per Philox block: elements 4q .. 4q+3 are words 0..3 of generate(seed, offset + q),
// so each 10-round block is computed once instead of once per element.
template <class T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, math::Dropout rule, uint64_t seed, uint64_t offset) {
  const acc_t<T> scale = rule.scale<acc_t<T>>();
  const int64_t groups = (n + 3) / 4;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < groups; q += int64_t(gridDim.x) * blockDim.x) {
    const philox::Block bits = philox::generate(seed, offset + uint64_t(q));
    for (int word = 0; word < 4; ++word) {
      const int64_t i = 4 * q + word;
      if (i >= n) break;
      out[i] = rule.keeps(bits.v[word]) ? from_acc<T>(to_acc(in[i]) * scale) : from_acc<T>(acc_t<T>(0));
    }
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void dropout(const Tensor& in, const Tensor& out, double p, uint64_t seed, uint64_t offset) {
  detail::check_cuda_device(in.device(), "dropout");
  HG_CHECK(in.is_contiguous() && out.is_contiguous() && in.numel() == out.numel(),
           "dropout: expected contiguous tensors of equal size, got ", in.shape(), " and ", out.shape());
  const int64_t n = in.numel();
  if (n == 0) return;
  visit_floating(in.dtype(), "dropout", [&]<class T> {
    dropout_kernel<T><<<kernels::cuda::blocks_for((n + 3) / 4), kernels::cuda::kThreads>>>(
        in.data_ptr<T>(), out.data_ptr<T>(), n, math::Dropout{p}, seed, offset);
  });
  HG_CHECK_LAUNCH("dropout_kernel");
}

}  // namespace hg::kernels::cuda
