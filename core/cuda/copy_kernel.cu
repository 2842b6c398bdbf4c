// Strided copy-and-convert on one CUDA device: the GPU half of detail::copy_into. Up to kMaxDims
// dimensions travel by value in the kernel arguments; each thread maps its linear index to an
// offset in both tensors.
#include <limits>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/cuda/device_math.cuh"

namespace hg::detail {

namespace {

constexpr int kMaxDims = 12;

struct StridedIndex {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

template <class To, class From>
__global__ void copy_kernel(To* dst, const From* src, int64_t numel, StridedIndex index) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, dst_offset = 0, src_offset = 0;
    for (int d = index.ndim - 1; d >= 0; --d) {
      const int64_t coordinate = rest % index.sizes[d];
      rest /= index.sizes[d];
      dst_offset += coordinate * index.dst_strides[d];
      src_offset += coordinate * index.src_strides[d];
    }
    dst[dst_offset] = cuda_detail::convert_value<To>(src[src_offset]);
  }
}

}  // namespace

void cuda_copy_into(const Tensor& dst, const Tensor& src) {
  check_cuda_device(dst.device(), "copy_");
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    copy_bytes(dst.raw_data(), dst.device(), src.raw_data(), src.device(),
               dst.numel() * int64_t(element_size(dst.dtype())));
    return;
  }
  HG_CHECK(dst.dim() <= kMaxDims, "copy_: CUDA copies support up to ", kMaxDims, " dimensions, got ", dst.dim());
  StridedIndex index{};
  index.ndim = dst.dim();
  const int lead = dst.dim() - src.dim();
  for (int d = 0; d < dst.dim(); ++d) {
    index.sizes[d] = dst.shape()[d];
    index.dst_strides[d] = dst.strides()[d];
    index.src_strides[d] = d < lead || src.shape()[d - lead] == 1 ? 0 : src.strides()[d - lead];
  }
  const int64_t numel = dst.numel();
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((numel + threads - 1) / threads, 65535));
  visit_dtype(dst.dtype(), [&]<class To> {
    visit_dtype(src.dtype(), [&]<class From> {
      copy_kernel<To, From><<<blocks, threads>>>(static_cast<To*>(dst.raw_data()),
                                                 static_cast<const From*>(src.raw_data()), numel, index);
    });
  });
  HG_CHECK_LAUNCH("copy_kernel");
}

}  // namespace hg::detail
