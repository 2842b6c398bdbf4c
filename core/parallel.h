// parallel_for with a grain size: work smaller than `grain` items stays on the calling thread
// (spawning threads costs microseconds), larger work is split into contiguous chunks across the
// OpenMP threads. hg::set_num_threads / get_num_threads control the thread count.
//
// NOTE: reductions must not depend on how the range is split. They use parallel_chunks, whose
// chunk boundaries depend only on the range and the chunk size, never on the thread count.
#pragma once
#include <cstdint>
#include <functional>

namespace hg {

void set_num_threads(int n);
int get_num_threads();

namespace detail {
bool in_parallel_region();
void parallel_for_impl(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body);
}  // namespace detail

// body(chunk_begin, chunk_end) over [begin, end).
template <class Body>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  if (end - begin <= grain || detail::in_parallel_region() || get_num_threads() == 1) {
    if (end > begin) body(begin, end);
    return;
  }
  detail::parallel_for_impl(begin, end, grain, body);
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
