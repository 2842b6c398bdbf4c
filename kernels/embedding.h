// The embedding kernels: out[..., :] = weight[index, :] and its backward, on the weight's device.
// An out-of-range index is an hg::Error, never a read outside the table: checked before the copy
// on the CPU, by the kernel on a GPU (reported at the next synchronisation, so the call never
// waits for the GPU).
#pragma once
#include "core/tensor.h"

namespace hg::kernels {

// indices (i64 or i32, contiguous) and table (num, dim, contiguous) on one device; out has
// indices' shape + [dim].
void embedding_forward(const Tensor& indices, const Tensor& table, const Tensor& out);
// grad (num, dim), zero-filled, += each row of g into the row it came from, in index order on
// the CPU (deterministic); the GPU adds with atomics.
void embedding_backward(const Tensor& indices, const Tensor& g, const Tensor& grad);

}  // namespace hg::kernels
