// OpenMP behind parallel_for. Only this file includes omp.h.
#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace hg {

void set_num_threads(int n) {
  HG_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

namespace detail {

bool in_parallel_region() { return omp_in_parallel(); }

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body) {
  const int64_t n = end - begin;
  const int64_t threads = std::min<int64_t>(get_num_threads(), (n + grain - 1) / grain);
  const int64_t per_thread = (n + threads - 1) / threads;
  // NOTE: an exception may not leave an OpenMP region (that is std::terminate); the first one
  // is caught in its thread and rethrown here.
  std::exception_ptr error;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t lo = begin + t * per_thread, hi = std::min(end, lo + per_thread);
    try {
      if (lo < hi) body(lo, hi);
    } catch (...) {
#pragma omp critical(hg_parallel_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

}  // namespace hg
