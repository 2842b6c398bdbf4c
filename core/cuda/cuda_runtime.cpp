// Device discovery and host<->device copies through the CUDA runtime. Any error from
// cudaGetDeviceCount (no driver: cudaErrorInsufficientDriver; no GPU: cudaErrorNoDevice) means
// "no CUDA device", so a CUDA build runs unchanged on a machine without a GPU.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/device.h"

namespace hg {

namespace cuda {

bool built_with_cuda() { return true; }

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

void synchronize() {
  if (is_available()) HG_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace cuda

namespace detail {

void check_cuda_device(Device device, std::string_view op) {
  HG_CHECK(cuda::is_available(), op, ": no CUDA device is available (", device,
           " requested; hg::cuda::is_available() is false)");
  HG_CHECK(device.index() < cuda::device_count(), op, ": ", device, " does not exist (",
           cuda::device_count(), " CUDA device(s))");
  HG_CUDA_CHECK(cudaSetDevice(device.index()));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, size_t(nbytes));
    return;
  }
  const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
  check_cuda_device(gpu, "copy");
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  // cudaMemcpy on the legacy default stream is ordered after every kernel we launched.
  HG_CUDA_CHECK(cudaMemcpy(dst, src, size_t(nbytes), kind));
}

}  // namespace detail

}  // namespace hg
