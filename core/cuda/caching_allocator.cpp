// The CUDA caching allocator. cudaMalloc and cudaFree cost tens of microseconds and cudaFree
// synchronises the device, so memory obtained from the driver is kept and handed out again: after
// the first training step no cudaMalloc/cudaFree happens at all.
//
// Memory comes from the driver in segments and is handed out in blocks carved from them:
//   * every request rounds up to 512 bytes (the alignment cuBLASLt/cuDNN like);
//   * small requests (<= 1 MiB) share 2 MiB segments; requests up to 10 MiB share 20 MiB
//     segments; larger ones get a segment of their own, rounded up to 2 MiB;
//   * a request takes the smallest free block that fits (best fit) and splits off the rest when
//     the rest is still useful (>= 512 B in the small pool, > 1 MiB in the large one), so a freed
//     64 MiB block serves two 30 MiB tensors and sixteen 1 MiB + 1 B tensors fit in one 20 MiB
//     segment instead of sixteen 2 MiB ones;
//   * a freed block merges with free neighbours of its segment, so splitting does not fragment
//     memory for good.
// Small and large requests use separate pools (as PyTorch's allocator does), so short-lived small
// tensors never pin a hole into a large segment. Everything runs on one stream (the legacy default
// stream), so a block freed by the host may be reused at once: later kernels run after earlier ones.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/storage.h"

namespace hg {

namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallRequest = size_t(1) << 20;     // up to this: the small pool
constexpr size_t kSmallSegment = size_t(2) << 20;
constexpr size_t kMediumRequest = size_t(10) << 20;   // up to this: shared 20 MiB segments
constexpr size_t kMediumSegment = size_t(20) << 20;
constexpr size_t kSegmentRound = size_t(2) << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// One block of a segment; blocks of a segment form a list in address order.
struct Block {
  char* ptr;
  size_t size;
  bool small;  // which pool
  bool free = true;
  Block* prev = nullptr;
  Block* next = nullptr;
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

struct DeviceCache {
  std::set<Block*, BySize> free_small, free_large;
  std::unordered_map<void*, Block*> in_use;
  size_t reserved = 0;  // bytes obtained from cudaMalloc
  std::set<Block*, BySize>& pool(bool small) { return small ? free_small : free_large; }
};

class CachingAllocator {
 public:
  void* allocate(size_t nbytes, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = caches_[device];
    const size_t size = round_up(std::max<size_t>(nbytes, 1), kRound);
    const bool small = size <= kSmallRequest;
    Block* block = take_free(cache, size, small);
    if (block == nullptr) block = new_segment(cache, size, small, device);
    split(cache, block, size);
    block->free = false;
    cache.in_use[block->ptr] = block;
    return block->ptr;
  }

  void deallocate(void* ptr, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = caches_[device];
    auto it = cache.in_use.find(ptr);
    HG_CHECK(it != cache.in_use.end(), "CUDA caching allocator: freeing a pointer it did not hand out");
    Block* block = it->second;
    cache.in_use.erase(it);
    block->free = true;
    // Merge with free neighbours: the segment's free space stays in as few blocks as possible.
    for (Block* neighbour : {block->prev, block->next}) {
      if (neighbour == nullptr || !neighbour->free) continue;
      cache.pool(block->small).erase(neighbour);
      Block* first = neighbour == block->prev ? neighbour : block;
      Block* second = first == block ? neighbour : block;
      first->size += second->size;
      first->next = second->next;
      if (second->next) second->next->prev = first;
      delete second;
      block = first;
    }
    cache.pool(block->small).insert(block);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, cache] : caches_) {
      HG_CUDA_CHECK(cudaSetDevice(device));
      release_free_segments(cache);
    }
  }

  size_t reserved(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return caches_[device].reserved;
  }

 private:
  // The smallest free block of the pool with at least `size` bytes, taken out of the free set.
  static Block* take_free(DeviceCache& cache, size_t size, bool small) {
    auto& pool = cache.pool(small);
    Block probe{nullptr, size, small};
    auto it = pool.lower_bound(&probe);
    if (it == pool.end()) return nullptr;
    Block* block = *it;
    pool.erase(it);
    return block;
  }

  // Splits the tail off `block` (now `size` bytes) into a free block when it is worth keeping.
  static void split(DeviceCache& cache, Block* block, size_t size) {
    const size_t rest = block->size - size;
    if (block->small ? rest < kRound : rest <= kSmallRequest) return;
    auto* tail = new Block{block->ptr + size, rest, block->small};
    tail->prev = block;
    tail->next = block->next;
    if (block->next) block->next->prev = tail;
    block->next = tail;
    block->size = size;
    cache.pool(tail->small).insert(tail);
  }

  Block* new_segment(DeviceCache& cache, size_t size, bool small, int device) {
    size_t segment = small ? kSmallSegment : size <= kMediumRequest ? kMediumSegment : round_up(size, kSegmentRound);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, segment);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_free_segments(cache);  // give cached memory back and try once more
      status = cudaMalloc(&ptr, segment);
    }
    if (status == cudaErrorMemoryAllocation && segment > round_up(size, kSegmentRound)) {
      (void)cudaGetLastError();
      segment = round_up(size, kSegmentRound);  // no room for a shared segment: one just big enough
      status = cudaMalloc(&ptr, segment);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      HG_FAIL("CUDA out of memory: tried to allocate ", double(size) / double(1 << 20), " MiB on cuda:", device, " (",
              double(memory::allocated(Device::cuda(device))) / double(1 << 20), " MiB held by tensors, ",
              double(cache.reserved) / double(1 << 20), " MiB reserved)");
    }
    HG_CUDA_CHECK(status);
    cache.reserved += segment;
    return new Block{static_cast<char*>(ptr), segment, small};
  }

  // cudaFree of every segment that is one free block; each cudaFree waits for the device.
  static void release_free_segments(DeviceCache& cache) {
    for (bool small : {true, false}) {
      auto& pool = cache.pool(small);
      for (auto it = pool.begin(); it != pool.end();) {
        Block* block = *it;
        if (block->prev != nullptr || block->next != nullptr) {
          ++it;
          continue;
        }
        (void)cudaFree(block->ptr);
        cuda_detail::count_host_sync();
        cache.reserved -= block->size;
        it = pool.erase(it);
        delete block;
      }
    }
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
