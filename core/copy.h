// copy_into: writes src into dst elementwise (src broadcast to dst's shape), converting dtypes
// with the rules of convert.h, between any strides and any two devices. The kernel behind
// Tensor::to, contiguous(), clone() and copy_().
#pragma once
#include "core/float8.h"
#include "core/tensor.h"

namespace hg::detail {
// `overflow` matters only when dst is an 8-bit float (core/float8.h).
void copy_into(const Tensor& dst, const Tensor& src, Float8Overflow overflow = Float8Overflow::Default);
// Strides of `t` seen through broadcasting to `shape` (0 on broadcast dimensions).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
// CUDA side (core/cuda/copy_kernel.cu): both tensors on the same CUDA device, same shape after broadcast.
void cuda_copy_into(const Tensor& dst, const Tensor& src);

// The layouts the kernels need, without an autograd node (Tensor::contiguous, view and
// transpose are ops: they record one when their input requires grad, and a kernel records
// nothing). All keep the dtype and device.
Tensor dense_copy(const Tensor& t);                  // a fresh contiguous copy
Tensor dense(const Tensor& t);                       // t when contiguous, else dense_copy(t)
Tensor dense_view(const Tensor& t, Shape shape);     // a contiguous t seen with another shape
Tensor transposed_view(const Tensor& t);             // the last two dims swapped (shares storage)
}  // namespace hg::detail
