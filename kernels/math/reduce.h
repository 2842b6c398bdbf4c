// Reduction steps shared by the CPU loops and the CUDA kernels (kernels/math/softmax.h,
// kernels/math/cross_entropy.h, the CUDA warp reductions in ops/cuda/warp_reduce.cuh).
#pragma once
#include "kernels/math/common.h"

namespace hg::math {

// The larger of a and b where NaN counts as the largest and a NaN already held stays, so a NaN
// anywhere in a row makes its maximum NaN (as PyTorch's max and softmax).
template <class A>
HG_HD A nan_max(A a, A b) {
  return (b > a || b != b) ? b : a;
}

}  // namespace hg::math
