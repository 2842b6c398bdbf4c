// parallel_for: halfgrad's CPU parallelism. Work smaller than `grain` items stays on the calling
// thread (handing work to another thread costs microseconds); larger work is cut into tasks that
// the calling thread and the pool's workers claim one at a time (core/parallel.cpp). The
// calling thread never waits for a worker that has not started: on a busy machine, where
// another program holds a core, the work simply runs on fewer threads instead of stalling at a
// barrier. hg::set_num_threads / get_num_threads control the thread count (default: the cores
// this process may run on, or HG_NUM_THREADS / OMP_NUM_THREADS when set).
//
// NOTE: reductions must not depend on how the range is split. They use parallel_chunks, whose
// chunk boundaries depend only on the range and the chunk size, never on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>

namespace hg {

void set_num_threads(int n);
int get_num_threads();

// The smallest task worth handing to another thread, in elementwise operations (tens of
// microseconds of work). grain_for(cost) turns it into items, for items costing `cost` each:
// parallel_for(0, rows, grain_for(columns), ...). A batch-128 MLP's elementwise ops, softmax
// and bias sums stay on one thread.
inline constexpr int64_t kMinTaskWork = 32768;
inline int64_t grain_for(int64_t cost_per_item) { return std::max<int64_t>(1, kMinTaskWork / std::max<int64_t>(1, cost_per_item)); }

namespace detail {
bool in_parallel_region();
// Runs task(0) .. task(num_tasks - 1) on the calling thread and the pool's workers; returns when
// all have finished, rethrowing the first exception a task threw.
void run_tasks(int64_t num_tasks, const std::function<void(int64_t)>& task);
}  // namespace detail

// body(chunk_begin, chunk_end) over [begin, end), in contiguous chunks of at least `grain` items.
template <class Body>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t threads = get_num_threads();
  if (n <= grain || threads == 1 || detail::in_parallel_region()) return body(begin, end);
  // NOTE: up to 8 tasks per thread: a thread that is descheduled holds up at most one small task.
  const int64_t tasks = std::min<int64_t>((n + grain - 1) / std::max<int64_t>(grain, 1), 8 * threads);
  const int64_t per_task = (n + tasks - 1) / tasks;
  detail::run_tasks((n + per_task - 1) / per_task, [&](int64_t t) {
    const int64_t lo = begin + t * per_task;
    body(lo, std::min(end, lo + per_task));
  });
}

// body(chunk_index, chunk_begin, chunk_end) for fixed chunks of `chunk` items: the split is the
// same for 1 or N threads, so per-chunk partial results combine deterministically.
template <class Body>
void parallel_chunks(int64_t n, int64_t chunk, const Body& body) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  parallel_for(0, num_chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) body(c, c * chunk, std::min(n, (c + 1) * chunk));
  });
}

}  // namespace hg
