// The CPU allocator and the per-device byte counters behind hg::memory.
//
// The CPU allocator caches freed blocks of 64 KiB and more: a training step frees and re-creates
// the same activation sizes every iteration, and returning them to the OS would cost a page fault
// (and a zeroed page) per 4 KiB on the next step. Small blocks go straight to malloc, which
// already recycles them. The counters report bytes held by tensors, never cached bytes.
#include "core/storage.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace hg {

namespace {

constexpr int kMaxCudaDevices = 16;
constexpr size_t kCpuAlignment = 64;  // a cache line, and an AVX-512 register

struct ByteCounter {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
};

ByteCounter& counter(Device device) {
  static std::array<ByteCounter, 1 + kMaxCudaDevices> counters;
  if (device.is_cpu()) return counters[0];
  HG_CHECK(device.index() < kMaxCudaDevices, "memory: device index ", device.index(), " too large");
  return counters[1 + device.index()];
}

int64_t physical_memory_bytes() {
  static const int64_t bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::string gib(int64_t bytes) { return detail::str(double(bytes) / double(1 << 30), " GiB"); }

class CpuBlockCache {
 public:
  static constexpr size_t kMinCached = size_t(64) << 10;
  static constexpr size_t kMaxCachedBytes = size_t(1) << 30;

  void* allocate(size_t bytes) {
    if (bytes >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= bytes + bytes / 4) {  // reuse if at most 25% larger
        void* block = it->second;
        cached_bytes_ -= it->first;
        free_.erase(it);
        return block;
      }
    }
    void* block = std::aligned_alloc(kCpuAlignment, bytes);
    if (block != nullptr && bytes >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[block] = bytes;
    }
    return block;
  }

  void deallocate(void* block) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = sizes_.find(block);
      if (it != sizes_.end() && cached_bytes_ + it->second <= kMaxCachedBytes) {
        free_.emplace(it->second, block);
        cached_bytes_ += it->second;
        return;
      }
      if (it != sizes_.end()) sizes_.erase(it);
    }
    std::free(block);
  }

  int64_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(cached_bytes_);
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, block] : free_) {
      sizes_.erase(block);
      std::free(block);
    }
    free_.clear();
    cached_bytes_ = 0;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;        // size -> block, ready for reuse
  std::unordered_map<void*, size_t> sizes_;  // every cacheable block, free or in use
  size_t cached_bytes_ = 0;
};

// NOTE: intentionally leaked, so tensors destroyed during static destruction can still free.
CpuBlockCache& cpu_cache() {
  static auto* cache = new CpuBlockCache();
  return *cache;
}

}  // namespace

namespace detail {
void count_alloc(Device device, int64_t nbytes) {
  ByteCounter& c = counter(device);
  const int64_t now = c.live.fetch_add(nbytes) + nbytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}
void count_free(Device device, int64_t nbytes) { counter(device).live.fetch_sub(nbytes); }
}  // namespace detail

namespace memory {
int64_t allocated(Device device) { return counter(device).live.load(); }
int64_t peak_allocated(Device device) { return counter(device).peak.load(); }
void reset_peak(Device device) {
  ByteCounter& c = counter(device);
  c.peak.store(c.live.load());
}
int64_t reserved(Device device) {
  if (device.is_cpu()) return allocated(device) + cpu_cache().cached_bytes();
  return cuda::memory_reserved(device.index());
}
void empty_cache(Device device) {
  if (device.is_cpu()) cpu_cache().release();
  else cuda::empty_cache();
}
}  // namespace memory

std::shared_ptr<Storage> Storage::allocate(int64_t nbytes, Device device) {
  HG_CHECK(nbytes >= 0, "allocate: negative size ", nbytes);
  if (nbytes == 0) return std::shared_ptr<Storage>(new Storage(nullptr, 0, device));
  void* data = nullptr;
  if (device.is_cpu()) {
    // NOTE: refuse what can never fit before asking the OS: with overcommit a 4 TiB request may
    // "succeed" and fail later with the OOM killer instead of an exception.
    HG_CHECK(nbytes <= physical_memory_bytes(), "out of memory: tried to allocate ", gib(nbytes),
             " on cpu, which has ", gib(physical_memory_bytes()), " in total");
    const size_t rounded = (size_t(nbytes) + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    data = cpu_cache().allocate(rounded);
    HG_CHECK(data != nullptr, "out of memory: tried to allocate ", gib(nbytes), " on cpu (",
             gib(memory::allocated(device)), " already held by tensors)");
  } else {
    data = detail::cuda_allocate(nbytes, device.index());
  }
  detail::count_alloc(device, nbytes);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device));
}

Storage::~Storage() {
  if (data_ == nullptr) return;
  detail::count_free(device_, nbytes_);
  if (device_.is_cpu()) cpu_cache().deallocate(data_);
  else detail::cuda_deallocate(data_, nbytes_, device_.index());
}

}  // namespace hg
