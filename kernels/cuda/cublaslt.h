// What the cuBLASLt GEMMs (kernels/cuda/gemm.cpp, kernels/cuda/fp8_gemm.cpp) share: the per-device
// handle and workspace, RAII owners of the descriptors, and the alignment rule the heuristic reads.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "kernels/cuda/library_check.h"

namespace hg::kernels::cuda {

// NOTE: 32 MiB is what cuBLAS itself recommends for Hopper; the heuristic then offers split-K and
// stream-K kernels that need scratch space.
inline constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct LtDevice {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kWorkspaceBytes, cudaMalloc'ed once (see allocate_library_workspace)
};

// The lock around lt_device's table and the heuristic caches.
std::mutex& lt_mutex();
// One handle and one workspace per device, created on first use and never destroyed (defined in
// gemm.cpp). The workspace is shared by every GEMM on the device; that is safe because they all
// run in order on the one default stream.
LtDevice& lt_device(int index);

// The largest power of two, up to 256, that divides the address. Kernels that use vector loads
// need aligned pointers, and the heuristic assumes 256 unless told otherwise (a view with an
// offset is less aligned).
inline uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// RAII owners: constructors only create (so a throw leaks nothing); attributes are set after.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
    HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, scale));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <class V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
  }
};

struct MatrixLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  MatrixLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {  // column-major
    HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  }
  ~MatrixLayout() { cublasLtMatrixLayoutDestroy(layout); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
  void set_batch(int64_t batch, int64_t stride) {
    const int32_t count = int32_t(batch);
    HG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    HG_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
  }
};

}  // namespace hg::kernels::cuda
