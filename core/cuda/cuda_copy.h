// Raw byte copies between any two devices (CPU<->CPU, host<->device, device<->device), and the
// check that a CUDA device exists and is current. Both builds provide them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/device.h"

namespace hg::detail {
void check_cuda_device(Device device, std::string_view op);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes);
}  // namespace hg::detail
