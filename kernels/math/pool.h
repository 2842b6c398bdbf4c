// The pooling windows' geometry and rules, the one definition the CPU loops (kernels/pool.cpp,
// kernels/cpu/pool.cpp) and the CUDA kernels (kernels/cuda/pool.cu) both run.
#pragma once
#include <cstdint>

#include "kernels/math/common.h"

namespace hg::kernels::math {

// One pooling without padding: planes = N * C, input H x W, output OH x OW with
// OH = (H - kernel) / stride + 1 (the same for W).
struct PoolGeometry {
  int64_t planes, H, W, OH, OW, kernel, stride;
};

inline PoolGeometry pool_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int kernel, int stride) {
  return {N * C, H, W, (H - kernel) / stride + 1, (W - kernel) / stride + 1, kernel, stride};
}

// max_pool2d scans a window in order and keeps the best value and its index: value v replaces
// the best b if larger or NaN (v != v only for NaN), and once the best is NaN (b != b) nothing
// replaces it. So NaN wins, then the first maximum. NOTE: bitwise & and | on the comparisons
// keep the CPU loops free of branches (they vectorise).
template <class A>
HG_HD bool max_pool_takes(A best, A v) {
  return ((v > best) | (v != v)) & (best == best);
}

// avg_pool2d's weight of each value in a kernel x kernel window.
template <class A>
HG_HD A avg_pool_weight(int kernel) {
  return A(1) / A(kernel * kernel);
}

}  // namespace hg::kernels::math
