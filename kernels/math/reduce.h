// Reduction steps shared by the CPU loops and the CUDA kernels (kernels/math/softmax.h,
// kernels/math/cross_entropy.h, the CUDA warp reductions in kernels/cuda/warp_reduce.cuh).
#pragma once
#include <cstdint>

#include "kernels/math/common.h"

namespace hg::kernels::math {

// The larger of a and b where NaN counts as the largest and a NaN already held stays, so a NaN
// anywhere in a row makes its maximum NaN (as PyTorch's max and softmax).
template <class A>
HG_HD A nan_max(A a, A b) {
  return (b > a || b != b) ? b : a;
}

// amax/argmax's order on (value, index) pairs: NaN is the largest value, then the larger value,
// then the smaller index. A scan in index order (the CPU) and a tree of pairs meeting in any
// order (the CUDA warps) both end at the first NaN, else the first maximum. (For integers
// v != v is never true.)
template <class A>
HG_HD bool max_beats(A a, int64_t a_index, A b, int64_t b_index) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a != b) return a > b;
  return a_index < b_index;
}

}  // namespace hg::kernels::math
