// Raw byte copies between any two devices (CPU<->CPU, host<->device, device<->device), the check
// that a CUDA device exists and is current, and small slots of mapped host memory. Both builds
// provide them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/device.h"

namespace hg::detail {
void check_cuda_device(Device device, std::string_view op);
// Host<->device copies wait for the GPU (and count in hg::cuda::sync_count()); a device<->device
// copy is queued behind the kernels already launched and returns at once.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes);

// 64 bytes of pinned host memory mapped into every device's address space: kernels write it
// through `device`, the host reads `host` at any time without synchronising and sees what the
// finished kernels wrote. For flags the host polls (the GradScaler's skip counter). The slots come
// from pages that are never handed back (cudaFreeHost would synchronise); a released slot is
// reused. A CPU-only build throws "built without CUDA".
struct MappedSlot {
  void* host = nullptr;
  void* device = nullptr;
};
inline constexpr size_t kMappedSlotBytes = 64;
MappedSlot acquire_mapped_slot();
void release_mapped_slot(MappedSlot slot);
}  // namespace hg::detail
