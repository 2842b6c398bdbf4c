// HG_CUDA_CHECK: every CUDA runtime call goes through it, so a failure becomes an hg::Error with
// the file, the line and CUDA's own error name and text (never an abort).
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
