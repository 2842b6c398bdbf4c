// The CUDA kernels' entry points that the op families call when a tensor is on a GPU. Defined in
// ops/cuda/*.cu in a CUDA build; in a CPU-only build (core/no_cuda/) each throws
// hg::Error("... built without CUDA").
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::cuda_ops {

enum class ReduceKind { Sum, Mean, Max, ArgMax };
// x viewed as contiguous (outer, reduce, inner) -> out (outer, inner).
void reduce(ReduceKind kind, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduce, int64_t inner);

}  // namespace hg::cuda_ops
