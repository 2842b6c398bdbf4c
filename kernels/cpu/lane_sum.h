// Deterministic sums that vectorise: sum over i < n of term(i) in double, kept in kLanes
// independent running sums combined at the end. Each lane is an ordinary sequential sum, so the
// compiler may run the lanes as one vector without reordering any addition (a single running sum
// stays scalar: its additions may not be reassociated). The order depends on n alone, never on
// the thread count. Used by the norms' statistics and the depthwise convolution's weight gradient.
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

inline constexpr int64_t kLanes = 8;

template <class Term>
double lane_sum(int64_t n, const Term& term) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) lanes[k] += term(i + k);
  double total = 0;
  for (const double lane : lanes) total += lane;
  for (; i < n; ++i) total += term(i);
  return total;
}

}  // namespace hg::kernels::cpu
