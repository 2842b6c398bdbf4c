// CUDA dropout, the twin of ops/dropout.cpp: out[i] = keep(i) ? in[i] / (1 - p) : 0 with
// keep(i) = philox::uniform(seed, offset, i, 24) >= p. Philox is counter-based, so the GPU draws
// exactly the CPU's mask (same bits, same double comparison) with no state to share.
#include "core/cuda/device_math.cuh"
#include "core/philox.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::cuda_kernels {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- math -----------------------------------------------------------------------------------------

constexpr int kBits = 24;  // the CPU's philox::uniform(..., 24)

// philox::uniform(seed, offset, i, 24) for word `word` of the block that element i = 4q + word
// falls in: the top 24 bits as a multiple of 2^-24 (exact in double), compared in double.
__device__ __forceinline__ bool keep(uint32_t word, double p) {
  return double(word >> (32 - kBits)) * 0x1p-24 >= p;
}

// ---- kernels --------------------------------------------------------------------------------------

// One thread per Philox block: elements 4q .. 4q+3 are words 0..3 of generate(seed, offset + q),
// so each 10-round block is computed once instead of once per element.
template <class T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, double p, acc_t<T> scale, uint64_t seed,
                               uint64_t offset) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < groups; q += int64_t(gridDim.x) * blockDim.x) {
    const philox::Block bits = philox::generate(seed, offset + uint64_t(q));
    for (int word = 0; word < 4; ++word) {
      const int64_t i = 4 * q + word;
      if (i >= n) break;
      out[i] = keep(bits.v[word], p) ? from_acc<T>(to_acc(in[i]) * scale) : from_acc<T>(acc_t<T>(0));
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
    // NOTE: 1 / (1 - p) in double, then rounded to the compute type: the CPU's scale, bit for bit.
    const acc_t<T> scale = acc_t<T>(1.0 / (1.0 - p));
    dropout_kernel<T><<<cuda_detail::blocks_for((n + 3) / 4), cuda_detail::kThreads>>>(
        in.data_ptr<T>(), out.data_ptr<T>(), n, p, scale, seed, offset);
  });
  HG_CHECK_LAUNCH("dropout_kernel");
}

}  // namespace hg::cuda_kernels
