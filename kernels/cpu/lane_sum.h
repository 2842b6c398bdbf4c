// Deterministic sums that vectorise: sum over i < n of term(i), kept in kLaneCount independent
// running sums of type A (lane k sums the terms k, k + kLaneCount, ...; the tail goes into the
// lanes too) combined in double at the end. Each lane is an ordinary sequential sum, so the
// compiler may run the lanes as one vector without reordering any addition (a single running sum
// stays scalar: its additions may not be reassociated). The order depends on n alone, never on
// the thread count. A = double for the norms' row statistics and the depthwise convolution's
// weight gradient; A = float for batch_norm's blocks of 256 values (16 lanes: one AVX-512 vector).
// lane_max is the same shape for a maximum, which no order changes: the lanes only make it fast.
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

inline constexpr int64_t kLanes = 8;

// lane_sum's two halves, for sums over several runs (the short rows of one batch_norm block):
// each run's terms added into the same lanes, lane k getting the run's terms k, k + kLaneCount,
// ... (its tail included), and the lanes combined once at the end.
//
// NOTE: the lanes are summed in a local copy. Summed in place, the caller's array may alias the
// values term() reads (as far as the compiler knows), so every addition was stored back to memory
// and the loop stayed scalar: batch_norm's backward sums were 4.4% of a ResNet-20 f32 step's perf
// samples, 2.85% once vectorised (docs/results.md section 23).
template <class A, int64_t kLaneCount, class Term>
void lane_accumulate(A (&lanes)[kLaneCount], int64_t n, const Term& term) {
  A sums[kLaneCount];
  for (int64_t k = 0; k < kLaneCount; ++k) sums[k] = lanes[k];
  int64_t i = 0;
  for (; i + kLaneCount <= n; i += kLaneCount)
    for (int64_t k = 0; k < kLaneCount; ++k) sums[k] += term(i + k);
  for (; i < n; ++i) sums[i % kLaneCount] += term(i);
  for (int64_t k = 0; k < kLaneCount; ++k) lanes[k] = sums[k];
}
// Two sums in one pass: terms(i) returns a pair {first term, second term}, each added into its
// own lanes as lane_accumulate adds them (the same order, so the same results bit for bit), for
// two sums whose terms share their loads: batch_norm's backward reads g, x and the output once for
// sum(g) and sum(g * (x - mean)) instead of twice.
template <class A, int64_t kLaneCount, class Terms>
void lane_accumulate_pair(A (&first)[kLaneCount], A (&second)[kLaneCount], int64_t n, const Terms& terms) {
  A a[kLaneCount], b[kLaneCount];
  for (int64_t k = 0; k < kLaneCount; ++k) a[k] = first[k], b[k] = second[k];
  int64_t i = 0;
  for (; i + kLaneCount <= n; i += kLaneCount)
    for (int64_t k = 0; k < kLaneCount; ++k) {
      const auto [u, v] = terms(i + k);
      a[k] += u;
      b[k] += v;
    }
  for (; i < n; ++i) {
    const auto [u, v] = terms(i);
    a[i % kLaneCount] += u;
    b[i % kLaneCount] += v;
  }
  for (int64_t k = 0; k < kLaneCount; ++k) first[k] = a[k], second[k] = b[k];
}
template <class A, int64_t kLaneCount>
double combine_lanes(const A (&lanes)[kLaneCount]) {
  double total = 0;
  for (const A lane : lanes) total += double(lane);
  return total;
}

template <class A = double, int64_t kLaneCount = kLanes, class Term>
double lane_sum(int64_t n, const Term& term) {
  A lanes[kLaneCount] = {};
  lane_accumulate(lanes, n, term);
  return combine_lanes(lanes);
}

// The largest of init and term(i), i < n, by `larger(a, b)` (the larger of the two: std::max's
// rule, NaN ignored, or math::nan_max's, NaN wins). A maximum is the same whatever the order, so
// kLaneCount running maxima combined at the end give a scan's value; a scan's single running
// maximum is a chain of dependent compares the compiler will not vectorise.
template <class A, int64_t kLaneCount = 16, class Term, class Larger>
A lane_max(int64_t n, A init, const Term& term, const Larger& larger) {
  A lanes[kLaneCount];
  for (A& lane : lanes) lane = init;
  int64_t i = 0;
  for (; i + kLaneCount <= n; i += kLaneCount)
    for (int64_t k = 0; k < kLaneCount; ++k) lanes[k] = larger(lanes[k], term(i + k));
  for (; i < n; ++i) lanes[i % kLaneCount] = larger(lanes[i % kLaneCount], term(i));
  // The lanes in a tree, log2(kLaneCount) steps deep (one after another, 15 dependent compares
  // cost a 256-class cross_entropy row as much as its max): the same maximum -- under
  // math::nan_max's rule a NaN lane wins in any order, under std::max's no lane holds a NaN
  // unless init does.
  static_assert((kLaneCount & (kLaneCount - 1)) == 0, "lane_max: a power-of-two lane count");
  for (int64_t step = kLaneCount / 2; step > 0; step /= 2)
    for (int64_t k = 0; k < step; ++k) lanes[k] = larger(lanes[k], lanes[k + step]);
  return kLaneCount > 0 ? larger(init, lanes[0]) : init;
}

}  // namespace hg::kernels::cpu
