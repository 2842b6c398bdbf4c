// What the cuBLASLt and cuDNN wrappers (kernels/cuda/gemm.cpp, kernels/cuda/conv.cpp) share: the
// HG_CUBLAS_CHECK / HG_CUDNN_CHECK macros, which turn a failed library call into an hg::Error with
// the file, the line, the library's own status text and the call (never an abort), like
// HG_CUDA_CHECK does for the runtime; and the allocation of the libraries' workspaces.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/device.h"
#include "core/error.h"

namespace hg::kernels::cuda {

// cuDNN 9 keeps a more specific message than the status name for the calling thread's last
// failure: " (that message)", or "" when it has none.
inline std::string cudnn_last_error() {
  char message[512] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  return message[0] == '\0' ? std::string() : " (" + std::string(message) + ")";
}

// Device memory for a library workspace, outside the caching allocator and therefore outside
// hg::memory's tensor counters (it is reserved once and lives as long as the process). The
// caching allocator may hold the free memory we need, so an out-of-memory failure empties its
// cache and tries once more.
inline void* allocate_library_workspace(size_t nbytes, const char* what) {
  void* block = nullptr;
  cudaError_t status = cudaMalloc(&block, nbytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    ::hg::cuda::empty_cache();
    status = cudaMalloc(&block, nbytes);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    HG_FAIL("CUDA out of memory: cannot allocate the ", double(nbytes) / double(1 << 20), " MiB ", what,
            " workspace");
  }
  HG_CUDA_CHECK(status);
  return block;
}

}  // namespace hg::kernels::cuda

// NOTE: a failed library call may leave a (non-sticky) CUDA error behind; it is cleared so that
// the next, unrelated call does not report it.
#define HG_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                              \
    const cublasStatus_t hg_status_ = (expr);                                                       \
    if (hg_status_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      (void)cudaGetLastError();                                                                     \
      HG_FAIL(__FILE__, ":", __LINE__, ": cuBLASLt error ", cublasLtGetStatusName(hg_status_), ": ", \
              cublasLtGetStatusString(hg_status_), " in ", #expr);                                  \
    }                                                                                               \
  } while (0)

#define HG_CUDNN_CHECK(expr)                                                               \
  do {                                                                                     \
    const cudnnStatus_t hg_status_ = (expr);                                               \
    if (hg_status_ != CUDNN_STATUS_SUCCESS) {                                              \
      (void)cudaGetLastError();                                                            \
      HG_FAIL(__FILE__, ":", __LINE__, ": cuDNN error ", cudnnGetErrorString(hg_status_),  \
              ::hg::kernels::cuda::cudnn_last_error(), " in ", #expr);                       \
    }                                                                                      \
  } while (0)
