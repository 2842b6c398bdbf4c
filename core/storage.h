// Storage: one block of device memory shared by a tensor and all its views, with the version
// counter autograd uses to detect in-place changes to saved tensors. Every byte goes through the
// per-device allocator, which keeps the live/peak counters hg::memory reports.
//
//   auto before = hg::memory::allocated();
//   { hg::Tensor t = hg::zeros({1024}); }      // +4096 bytes while t lives
//   assert(hg::memory::allocated() == before);
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace hg {

namespace memory {
int64_t allocated(Device device = Device::cpu());       // bytes held by live tensors now
int64_t peak_allocated(Device device = Device::cpu());  // the most held since the last reset_peak
void reset_peak(Device device = Device::cpu());         // peak := allocated
void empty_cache(Device device = Device::cpu());        // returns cached free blocks to the system
// Bytes the device's allocator holds: those of live tensors plus its cached free blocks (on
// CUDA, every segment obtained from cudaMalloc). reserved - allocated is what caching costs.
int64_t reserved(Device device = Device::cpu());
}  // namespace memory

class Storage {
 public:
  // Allocates nbytes on `device` (64-byte aligned on the CPU). Throws hg::Error when the size is
  // absurd or the device is out of memory; the allocator keeps working afterwards.
  static std::shared_ptr<Storage> allocate(int64_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Bumped by every in-place write; autograd compares it with the value seen at save time.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Storage(void* data, int64_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  int64_t nbytes_;
  Device device_;
  uint64_t version_ = 0;
};

namespace detail {
// Counter updates, used by the CPU allocator and the CUDA caching allocator.
void count_alloc(Device device, int64_t nbytes);
void count_free(Device device, int64_t nbytes);
// The CUDA side (core/cuda/ or core/no_cuda/): raw device memory from the caching allocator.
void* cuda_allocate(int64_t nbytes, int device_index);
void cuda_deallocate(void* ptr, int64_t nbytes, int device_index);
}  // namespace detail

}  // namespace hg
