// The reduction kernels: sum, mean, max and argmax over some dimensions of a tensor, run on the
// tensor's device (CPU loops here, CUDA kernels in kernels/cuda/reduce.cu). They record nothing
// and consult no autocast state: ops/reduce.cpp puts checks, autocast and the autograd node
// around them, and the engine, anomaly mode and the CUDA conv's bias gradient call them directly.
//
// Every reduction is first brought to one shape, a contiguous (outer, R, inner) block: reduced
// dimensions that are not adjacent are permuted to the end (a copy). Sums accumulate in double
// (floating inputs) or int64 (integers) in fixed chunks, so results do not depend on the thread
// count; max and argmax propagate NaN (NaN counts as the maximum).
#pragma once
#include <string_view>

#include "core/tensor.h"

namespace hg::kernels {

enum class ReduceKind { Sum, Mean, Max, ArgMax };

struct Reduction {
  Tensor x;  // contiguous, laid out as (outer, R, inner)
  int64_t outer = 1, R = 1, inner = 1;
  Shape out_shape;      // without the reduced dims
  Shape keepdim_shape;  // reduced dims as 1
};

// Normalises `dims` (an error names `op`) and lays x out for the kernels (no autograd history).
Reduction plan_reduction(const Tensor& x, const Shape& dims, std::string_view op);
Shape all_dims(const Tensor& x);

// The reduction on plan.x's device. Sum/Mean: x's dtype for floating x, i64 for integers (mean
// needs floating x); Max: x's dtype; ArgMax: i64, the first maximal index. Max/ArgMax need R > 0.
Tensor reduce(ReduceKind kind, const Reduction& plan, bool keepdim);

// Whether some element of t is NaN (anomaly mode), on any device.
bool has_nan(const Tensor& t);

}  // namespace hg::kernels
