// copy_into: writes src into dst elementwise (src broadcast to dst's shape), converting dtypes
// with the rules of convert.h, between any strides and any two devices. The kernel behind
// Tensor::to, contiguous(), clone() and copy_().
#pragma once
#include "core/tensor.h"

namespace hg::detail {
void copy_into(const Tensor& dst, const Tensor& src);
// Strides of `t` seen through broadcasting to `shape` (0 on broadcast dimensions).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
// CUDA side (kernels/cuda/copy.cu): both tensors on the same CUDA device, same shape after broadcast.
void cuda_copy_into(const Tensor& dst, const Tensor& src);
}  // namespace hg::detail
