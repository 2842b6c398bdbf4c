// Small helpers shared by the benchmark programs: a robust timer (median of repeated runs after
// a warm-up) and table printing. Benchmarks print tables; they never assert on time.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace hg_bench {

// Seconds per call of `fn` over enough repetitions to run ~`budget` seconds, after a warm-up:
// the median (what a user sees) and the best (what the code can do when the machine lets it).
struct Timing {
  double median, best;
};

inline Timing time_runs(const std::function<void()>& fn, double budget = 0.3) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: allocator, caches, lazy initialisation
  const auto t0 = clock::now();
  fn();
  const double once = std::max(1e-6, std::chrono::duration<double>(clock::now() - t0).count());
  const int reps = std::clamp(int(budget / once), 3, 200);
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    const auto start = clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front()};
}

// Median seconds per call of `fn`.
inline double time_it(const std::function<void()>& fn, double budget = 0.3) { return time_runs(fn, budget).median; }

}  // namespace hg_bench
