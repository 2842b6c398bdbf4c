// HG_CUDA_CHECK: every CUDA runtime call goes through it, so a failure becomes an hg::Error with
// the file, the line and CUDA's own error name and text (never an abort).
// HG_CHECK_LAUNCH(kernel): after every kernel launch. A launch error names the kernel; with the
// environment variable HG_CUDA_SYNC=1 the host also waits for the kernel and checks how it ran,
// so an illegal address or a device-side error is reported against the kernel that caused it
// instead of at some later, unrelated call (slow: a debugging switch, like CUDA_LAUNCH_BLOCKING).
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

#define HG_CUDA_CHECK(expr)                                                                  \
  do {                                                                                       \
    const cudaError_t hg_status_ = (expr);                                                   \
    if (hg_status_ != cudaSuccess) {                                                         \
      (void)cudaGetLastError(); /* clear the sticky-free error so later calls can proceed */ \
      HG_FAIL(__FILE__, ":", __LINE__, ": CUDA error ", cudaGetErrorName(hg_status_), ": ",  \
              cudaGetErrorString(hg_status_), " in ", #expr);                                \
    }                                                                                        \
  } while (0)

#define HG_CHECK_LAUNCH(kernel) ::hg::cuda_detail::check_launch(kernel, __FILE__, __LINE__)

namespace hg::cuda_detail {

// See HG_CHECK_LAUNCH above.
void check_launch(const char* kernel, const char* file, int line);
// Whether HG_CUDA_SYNC=1 was set when the library first looked (read once per process).
bool sync_after_launch();

// Every host synchronisation the library performs ends here: it counts it for
// hg::cuda::sync_count() and, now that the GPU has caught up, raises the error a kernel may have
// left in the device error slot (see core/cuda/device_error.h).
void after_host_sync();
// Counts a synchronisation without looking at the error slot: for waits inside bookkeeping (the
// allocator's cudaFree, a workspace swap) that must not be cut short by an exception.
void count_host_sync();

}  // namespace hg::cuda_detail
