// The CUDA caching allocator. cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks go to a per-device free list keyed by size and are handed out
// again: after the first training step no cudaMalloc/cudaFree happens at all.
//
// Size classes: requests round up to 512 bytes below 1 MiB and to 2 MiB above, so blocks are
// reused across slightly different shapes. A request takes the smallest cached block that fits
// and wastes at most 25% of it (otherwise a fresh block is allocated).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/storage.h"

namespace hg {

namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kLargeThreshold = size_t(1) << 20;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t size_class(size_t nbytes) {
  const size_t round = nbytes < kLargeThreshold ? kSmallRound : kLargeRound;
  return (nbytes + round - 1) / round * round;
}

struct DeviceCache {
  std::multimap<size_t, void*> free_blocks;       // size -> block, ready for reuse
  std::unordered_map<void*, size_t> block_sizes;  // every block we own, free or in use
  size_t reserved = 0;                            // bytes obtained from cudaMalloc
};

class CachingAllocator {
 public:
  void* allocate(size_t nbytes, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = caches_[device];
    const size_t size = size_class(nbytes);
    auto it = cache.free_blocks.lower_bound(size);
    if (it != cache.free_blocks.end() && it->first <= size + size / 4) {
      void* block = it->second;
      cache.free_blocks.erase(it);
      return block;
    }
    void* block = nullptr;
    cudaError_t status = cudaMalloc(&block, size);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_free_blocks(cache);  // give cached memory back and try once more
      status = cudaMalloc(&block, size);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      HG_FAIL("CUDA out of memory: tried to allocate ", double(size) / double(1 << 20), " MiB on cuda:",
              device, " (", double(memory::allocated(Device::cuda(device))) / double(1 << 20),
              " MiB held by tensors, ", double(cache.reserved) / double(1 << 20), " MiB reserved)");
    }
    HG_CUDA_CHECK(status);
    cache.block_sizes[block] = size;
    cache.reserved += size;
    return block;
  }

  void deallocate(void* block, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = caches_[device];
    cache.free_blocks.emplace(cache.block_sizes.at(block), block);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, cache] : caches_) {
      HG_CUDA_CHECK(cudaSetDevice(device));
      release_free_blocks(cache);
    }
  }

  size_t reserved(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return caches_[device].reserved;
  }

 private:
  static void release_free_blocks(DeviceCache& cache) {
    for (auto& [size, block] : cache.free_blocks) {
      (void)cudaFree(block);
      cache.block_sizes.erase(block);
      cache.reserved -= size;
    }
    cache.free_blocks.clear();
  }

  std::mutex mutex_;
  std::map<int, DeviceCache> caches_;
};

// NOTE: intentionally leaked: tensors with static lifetime may be freed after any static
// allocator object would have been destroyed.
CachingAllocator& allocator() {
  static auto* instance = new CachingAllocator();
  return *instance;
}

}  // namespace

namespace detail {
void* cuda_allocate(int64_t nbytes, int device_index) {
  check_cuda_device(Device::cuda(device_index), "allocate");
  return allocator().allocate(size_t(nbytes), device_index);
}
void cuda_deallocate(void* ptr, int64_t /*nbytes*/, int device_index) {
  allocator().deallocate(ptr, device_index);
}
}  // namespace detail

namespace cuda {
void empty_cache() {
  if (is_available()) allocator().empty_cache();
}
int64_t memory_reserved(int device_index) {
  return is_available() ? int64_t(allocator().reserved(device_index)) : 0;
}
}  // namespace cuda

}  // namespace hg
