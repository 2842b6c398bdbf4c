// fill_ on a GPU: the value's bytes written as they are, one element per thread.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace hg::cuda_kernels {

namespace {

// Word: an unsigned integer as wide as the element; the element's bytes are written as they are.
template <class Word>
__global__ void fill_contiguous_kernel(Word* out, int64_t numel, Word value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class Word>
__global__ void fill_strided_kernel(Word* out, int64_t numel, cuda_detail::StridedIndexer<1> ix, Word value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t offset[1];
    ix.offsets(i, offset);
    out[offset[0]] = value;
  }
}

template <class Word>
void launch_fill(const Tensor& t, uint64_t bits) {
  Word* out = static_cast<Word*>(t.raw_data());
  const int64_t numel = t.numel();
  if (t.is_contiguous()) {
    fill_contiguous_kernel<Word><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(out, numel, Word(bits));
    HG_CHECK_LAUNCH("fill_contiguous_kernel");
  } else {
    const auto ix = cuda_detail::make_indexer<1>(t, nullptr, 0);
    fill_strided_kernel<Word><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(out, numel, ix, Word(bits));
    HG_CHECK_LAUNCH("fill_strided_kernel");
  }
}

}  // namespace

void fill(const Tensor& t, uint64_t bits) {
  detail::check_cuda_device(t.device(), "fill_");
  if (t.numel() == 0) return;
  const size_t size = element_size(t.dtype());
  if (t.is_contiguous() && (bits == 0 || size == 1)) {  // every byte the same: the driver's memset
    HG_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), int(bits & 0xff), size_t(t.numel()) * size, nullptr));
    return;
  }
  if (size == 1) launch_fill<uint8_t>(t, bits);
  else if (size == 2) launch_fill<uint16_t>(t, bits);
  else if (size == 4) launch_fill<uint32_t>(t, bits);
  else launch_fill<uint64_t>(t, bits);
}

}  // namespace hg::cuda_kernels
