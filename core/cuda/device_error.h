// The device error slot: how a kernel reports a bad input without a device assert (an assert
// kills the CUDA context for good, pytorch#18014) and without the host checking the data first
// (that would copy it to the host and wait for the GPU on every call).
//
// The slot lives in mapped host memory. The first kernel thread that finds a problem claims it
// and writes what it found; the others leave it alone. The host looks at it after each of its
// synchronisations (cuda_detail::after_host_sync): loss.item(), a StepResult, synchronize() ...
// and throws the hg::Error there, naming the op, the bad value and its position. The kernel
// itself carries on with a harmless stand-in (an out-of-range target or index reads row 0 / is
// treated as ignored), so nothing outside the tensors is ever touched.
#pragma once
#include <cstdint>

namespace hg::cuda_detail {

enum class DeviceError : int32_t { None = 0, TargetOutOfRange = 1, IndexOutOfRange = 2 };

struct DeviceErrorSlot {
  int32_t claimed;  // 0 until a reporting thread takes the slot
  int32_t code;     // a DeviceError, written last
  int64_t position, value, limit;
};

// The slot's device-visible address (mapped on first use).
DeviceErrorSlot* device_error_slot();

#ifdef __CUDACC__
__device__ inline void report_device_error(DeviceErrorSlot* slot, DeviceError code, int64_t position, int64_t value,
                                           int64_t limit) {
  if (atomicCAS(&slot->claimed, 0, 1) != 0) return;  // an earlier report stands
  slot->position = position;
  slot->value = value;
  slot->limit = limit;
  __threadfence_system();  // the fields reach host memory before the code that announces them
  *reinterpret_cast<volatile int32_t*>(&slot->code) = int32_t(code);
}
#endif

}  // namespace hg::cuda_detail
