// fill on a GPU: the value's bytes written as they are, one element per thread, with the value as
// a kernel argument (no host->device copy, so nothing waits for the GPU). A strided destination
// (fill_ on a view, rare) is filled through a contiguous buffer and the device-side copy.
#include <algorithm>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/fill.h"

namespace hg::detail {

namespace {

// Word: an unsigned integer as wide as the element; the element's bytes are written as they are.
template <class Word>
__global__ void fill_kernel(Word* out, int64_t numel, Word value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class Word>
void launch_fill(void* data, int64_t numel, uint64_t bits) {
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((numel + threads - 1) / threads, 65535));
  fill_kernel<Word><<<blocks, threads>>>(static_cast<Word*>(data), numel, Word(bits));
  HG_CHECK_LAUNCH("fill_kernel");
}

}  // namespace

void cuda_fill(const Tensor& t, uint64_t bits) {
  check_cuda_device(t.device(), "fill_");
  if (t.numel() == 0) return;
  if (!t.is_contiguous()) {
    const Tensor dense = empty(t.shape(), t.options());
    cuda_fill(dense, bits);
    cuda_copy_into(t, dense);
    return;
  }
  const size_t size = element_size(t.dtype());
  if (bits == 0 || size == 1) {  // every byte the same: the driver's memset
    HG_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), int(bits & 0xff), size_t(t.numel()) * size, nullptr));
    return;
  }
  if (size == 2) launch_fill<uint16_t>(t.raw_data(), t.numel(), bits);
  else if (size == 4) launch_fill<uint32_t>(t.raw_data(), t.numel(), bits);
  else launch_fill<uint64_t>(t.raw_data(), t.numel(), bits);
}

}  // namespace hg::detail
