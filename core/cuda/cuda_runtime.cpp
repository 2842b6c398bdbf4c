// Device discovery, host<->device copies, and the bookkeeping of host synchronisations: their
// count (hg::cuda::sync_count), the device error slot checked after each, the HG_CUDA_SYNC=1
// launch check, and the mapped host slots. Any error from cudaGetDeviceCount (no driver:
// cudaErrorInsufficientDriver; no GPU: cudaErrorNoDevice) means "no CUDA device", so a CUDA build
// runs unchanged on a machine without a GPU.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/cuda/device_error.h"
#include "core/device.h"

namespace hg {

namespace {
std::atomic<int64_t> host_syncs{0};
}  // namespace

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
  if (!is_available()) return;
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  cuda_detail::after_host_sync();
}

int64_t sync_count() { return host_syncs.load(std::memory_order_relaxed); }

}  // namespace cuda

// ---- mapped host slots ------------------------------------------------------------------------------

namespace detail {

namespace {

constexpr size_t kMappedPageBytes = size_t(64) << 10;  // 1024 slots per page

class MappedSlots {
 public:
  MappedSlot acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) add_page();
    const MappedSlot slot = free_.back();
    free_.pop_back();
    std::memset(slot.host, 0, kMappedSlotBytes);
    return slot;
  }
  void release(MappedSlot slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

 private:
  void add_page() {
    void* host = nullptr;
    // NOTE: Portable: the page is mapped into every device's address space, not only the current one.
    HG_CUDA_CHECK(cudaHostAlloc(&host, kMappedPageBytes, cudaHostAllocMapped | cudaHostAllocPortable));
    cuda_detail::count_host_sync();  // page-locking host memory may wait for the device
    void* device = nullptr;
    HG_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    for (size_t offset = 0; offset < kMappedPageBytes; offset += kMappedSlotBytes)
      free_.push_back({static_cast<char*>(host) + offset, static_cast<char*>(device) + offset});
  }

  std::mutex mutex_;
  std::vector<MappedSlot> free_;
};

// NOTE: intentionally leaked, like the caching allocator: slots may be released during static
// destruction.
MappedSlots& mapped_slots() {
  static auto* slots = new MappedSlots();
  return *slots;
}

}  // namespace

MappedSlot acquire_mapped_slot() {
  // (Not check_cuda_device: that would make cuda:0 current under an op running on another GPU.
  // Portable mapped memory has one address on every device.)
  HG_CHECK(cuda::is_available(), "mapped host memory: no CUDA device is available");
  return mapped_slots().acquire();
}

void release_mapped_slot(MappedSlot slot) {
  if (slot.host != nullptr) mapped_slots().release(slot);
}

}  // namespace detail

// ---- synchronisation, the device error slot, launch checks ----------------------------------------

namespace cuda_detail {

namespace {

struct ErrorSlot {
  detail::MappedSlot slot = detail::acquire_mapped_slot();
  DeviceErrorSlot* host() const { return static_cast<DeviceErrorSlot*>(slot.host); }
  DeviceErrorSlot* device() const { return static_cast<DeviceErrorSlot*>(slot.device); }
};
static_assert(sizeof(DeviceErrorSlot) <= detail::kMappedSlotBytes);

ErrorSlot& error_slot() {
  static ErrorSlot slot;
  return slot;
}
std::atomic<bool> error_slot_made{false};

// The message of a kernel's report, phrased like the host-side checks of the same ops.
std::string describe(DeviceError code, int64_t position, int64_t value, int64_t limit) {
  const char* when = " (found by the GPU kernel and reported at the next synchronisation)";
  if (code == DeviceError::TargetOutOfRange)
    return detail::str("cross_entropy: Target ", value, " is out of bounds (", limit, " classes; targets must be in [0, ",
                       limit, ") or ignore_index), at position ", position, when);
  if (code == DeviceError::IndexOutOfRange)
    return detail::str("embedding: index ", value, " at position ", position, " is out of range for a table of ",
                       limit, " rows", when);
  return detail::str("a CUDA kernel reported error code ", int(code), when);
}

}  // namespace

DeviceErrorSlot* device_error_slot() {
  DeviceErrorSlot* slot = error_slot().device();
  error_slot_made.store(true, std::memory_order_release);
  return slot;
}

void count_host_sync() { host_syncs.fetch_add(1, std::memory_order_relaxed); }

void after_host_sync() {
  count_host_sync();
  if (!error_slot_made.load(std::memory_order_acquire)) return;
  DeviceErrorSlot* s = error_slot().host();
  const auto code = DeviceError(*reinterpret_cast<volatile int32_t*>(&s->code));
  if (code == DeviceError::None) return;
  const std::string message = describe(code, s->position, s->value, s->limit);
  // Clear it first: the error is reported once, and the slot takes the next one.
  *reinterpret_cast<volatile int32_t*>(&s->code) = 0;
  *reinterpret_cast<volatile int32_t*>(&s->claimed) = 0;
  HG_FAIL(message);
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* value = std::getenv("HG_CUDA_SYNC");
    return value != nullptr && value[0] != '\0' && value[0] != '0';
  }();
  return on;
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && sync_after_launch()) {
    status = cudaDeviceSynchronize();
    if (status == cudaSuccess) after_host_sync();
    else count_host_sync();
  }
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  HG_FAIL(file, ":", line, ": CUDA error ", cudaGetErrorName(status), ": ", cudaGetErrorString(status), " in kernel ",
          kernel, sync_after_launch() ? " (HG_CUDA_SYNC=1: the kernel itself failed)"
                                      : " (at its launch; run with HG_CUDA_SYNC=1 to check each kernel as it runs)");
}

}  // namespace cuda_detail

// ---- devices and copies ----------------------------------------------------------------------------

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
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    // Queued on the legacy default stream behind every kernel we launched; the host goes on.
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(nbytes), cudaMemcpyDeviceToDevice, nullptr));
    return;
  }
  // NOTE: cudaMemcpy to or from pageable host memory waits for the kernels queued before it.
  const cudaMemcpyKind kind = src_device.is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  HG_CUDA_CHECK(cudaMemcpy(dst, src, size_t(nbytes), kind));
  cuda_detail::after_host_sync();
}

}  // namespace detail

}  // namespace hg
