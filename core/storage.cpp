// The CPU allocator and the per-device byte counters behind hg::memory.
#include "core/storage.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>

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
    data = std::aligned_alloc(kCpuAlignment, rounded);
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
  if (device_.is_cpu()) std::free(data_);
  else detail::cuda_deallocate(data_, nbytes_, device_.index());
}

}  // namespace hg
