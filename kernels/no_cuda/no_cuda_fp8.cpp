// The CUDA FP8 entry points (kernels/cuda/fp8.h) in a CPU-only build: no device has FP8 tensor
// cores, and the quantiser and the GEMM say that halfgrad was built without CUDA.
#include "core/cuda/cuda_copy.h"
#include "kernels/cuda/fp8.h"

namespace hg::kernels::cuda {

void fp8_amax_into(const Tensor& t, const Tensor&) { detail::check_cuda_device(t.device(), "fp8_quantise"); }

Fp8DeviceTensor fp8_quantise(const Tensor& t, DType, int, const float*, bool) {
  detail::check_cuda_device(t.device(), "fp8_quantise");
  return {};
}

bool fp8_gemm_supported(Device) { return false; }

void fp8_gemm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor& out, const Tensor&) {
  detail::check_cuda_device(out.device(), "fp8_gemm");
  HG_FAIL("fp8_gemm: halfgrad was built without CUDA");
}

}  // namespace hg::kernels::cuda
