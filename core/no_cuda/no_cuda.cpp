// The CUDA entry points of a CPU-only build: queries answer "no device", anything that needs a
// GPU throws hg::Error("built without CUDA").
#include "core/cuda/cuda_copy.h"
#include "core/error.h"
#include "core/copy.h"
#include "core/fill.h"
#include "core/storage.h"
#include "core/cuda/gemm_settings.h"

namespace hg {

namespace cuda {
bool built_with_cuda() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
void synchronize() {}
void empty_cache() {}
void allow_tf32(bool) {}  // a CPU-only build has no TF32: the switch does nothing
bool tf32_allowed() { return false; }
int64_t memory_reserved(int) { return 0; }
int64_t sync_count() { return 0; }  // nothing to wait for
}  // namespace cuda

namespace detail {
void check_cuda_device(Device device, std::string_view op) {
  HG_FAIL(op, ": ", device, " requested, but halfgrad was built without CUDA (configure with -DHG_CUDA=ON)");
}
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) {
  if (nbytes == 0) return;
  if (!dst_device.is_cpu()) check_cuda_device(dst_device, "copy");
  if (!src_device.is_cpu()) check_cuda_device(src_device, "copy");
  std::memcpy(dst, src, size_t(nbytes));
}
void* cuda_allocate(int64_t, int device_index) {
  check_cuda_device(Device::cuda(device_index), "allocate");
  return nullptr;
}
void cuda_deallocate(void*, int64_t, int) {}
MappedSlot acquire_mapped_slot() {
  check_cuda_device(Device::cuda(), "mapped host memory");
  return {};
}
void release_mapped_slot(MappedSlot) {}
}  // namespace detail

}  // namespace hg

namespace hg::detail {
void cuda_copy_into(const Tensor& dst, const Tensor&) { check_cuda_device(dst.device(), "copy_"); }
void cuda_fill(const Tensor& t, uint64_t) { check_cuda_device(t.device(), "fill_"); }
}  // namespace hg::detail
