// Shared pieces of the CUDA kernels: launch geometry, the per-element launcher and the strided indexer that maps a linear
// element index to an offset in each operand (the GPU counterpart of core/loops.h).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/tensor.h"
#include "core/visit.h"

namespace hg::kernels::cuda {

constexpr int kThreads = 256;
constexpr int kMaxDims = 12;

inline int blocks_for(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535 * 8)); }

// The entry points of a one-thread-per-element kernel differ only in their launch: check the
// device, skip empty work, call launch.template operator()<T>(blocks) for `on`'s floating dtype
// with enough blocks for `elements` threads, check the launch (named `op`).
template <class Launch>
void launch_per_element(const char* op, const Tensor& on, int64_t elements, const Launch& launch) {
  detail::check_cuda_device(on.device(), op);
  if (elements == 0) return;
  visit_floating(on.dtype(), op, [&]<class T> { launch.template operator()<T>(blocks_for(elements)); });
  HG_CHECK_LAUNCH(op);
}

// Offsets of M operands (in elements) for a linear index over `sizes`.
template <int M>
struct StridedIndexer {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[M][kMaxDims];

  __device__ __forceinline__ void offsets(int64_t i, int64_t (&out)[M]) const {
    for (int k = 0; k < M; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t coordinate = i % sizes[d];
      i /= sizes[d];
      for (int k = 0; k < M; ++k) out[k] += coordinate * strides[k][d];
    }
  }
};

// The indexer of `out` and `inputs` broadcast to out's shape.
template <int M>
StridedIndexer<M> make_indexer(const Tensor& out, const Tensor* inputs, int count) {
  HG_CHECK(out.dim() <= kMaxDims, "CUDA kernels support up to ", kMaxDims, " dimensions, got ", out.dim());
  StridedIndexer<M> ix{};
  ix.ndim = out.dim();
  for (int d = 0; d < out.dim(); ++d) {
    ix.sizes[d] = out.shape()[d];
    ix.strides[0][d] = out.strides()[d];
  }
  for (int k = 0; k < count; ++k) {
    const Shape s = detail::broadcast_strides(inputs[k], out.shape());
    for (int d = 0; d < out.dim(); ++d) ix.strides[k + 1][d] = s[d];
  }
  return ix;
}

}  // namespace hg::kernels::cuda
