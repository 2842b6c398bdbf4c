// The op families' CUDA entry points (ops/cuda_ops.h) in a CPU-only build: each one says that
// halfgrad was built without CUDA.
#include "core/cuda/cuda_copy.h"
#include "ops/cuda_ops.h"

namespace hg::cuda_ops {

void reduce(ReduceKind, const Tensor& x, const Tensor&, int64_t, int64_t, int64_t) {
  detail::check_cuda_device(x.device(), "reduce");
}

}  // namespace hg::cuda_ops
