// Warp-level reductions shared by the row kernels (softmax, cross-entropy, norms). Butterfly
// shuffles: every lane ends with the same result, combined in a fixed order (deterministic).
#pragma once
#include "kernels/math/reduce.h"

namespace hg::kernels::cuda {

inline constexpr int kWarp = 32;

template <class A>
__device__ __forceinline__ A warp_max(A v) {
  for (int step = kWarp / 2; step > 0; step /= 2) v = math::nan_max(v, __shfl_xor_sync(0xffffffffu, v, step));
  return v;
}

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int step = kWarp / 2; step > 0; step /= 2) v += __shfl_xor_sync(0xffffffffu, v, step);
  return v;
}

}  // namespace hg::kernels::cuda
