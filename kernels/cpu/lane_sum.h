// Deterministic sums that vectorise: sum over i < n of term(i), kept in kLaneCount independent
// running sums of type A (lane k sums the terms k, k + kLaneCount, ...; the tail goes into the
// lanes too) combined in double at the end. Each lane is an ordinary sequential sum, so the
// compiler may run the lanes as one vector without reordering any addition (a single running sum
// stays scalar: its additions may not be reassociated). The order depends on n alone, never on
// the thread count. A = double for the norms' row statistics and the depthwise convolution's
// weight gradient; A = float for batch_norm's blocks of 256 values (16 lanes: one AVX-512 vector).
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

inline constexpr int64_t kLanes = 8;

template <class A = double, int64_t kLaneCount = kLanes, class Term>
double lane_sum(int64_t n, const Term& term) {
  A lanes[kLaneCount] = {};
  int64_t i = 0;
  for (; i + kLaneCount <= n; i += kLaneCount)
    for (int64_t k = 0; k < kLaneCount; ++k) lanes[k] += term(i + k);
  for (; i < n; ++i) lanes[i % kLaneCount] += term(i);
  double total = 0;
  for (const A lane : lanes) total += double(lane);
  return total;
}

}  // namespace hg::kernels::cpu
