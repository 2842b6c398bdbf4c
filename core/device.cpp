// Device naming and printing.
#include "core/device.h"

#include <ostream>

#include "core/error.h"

namespace hg {

Device Device::cuda(int index) {
  HG_CHECK(index >= 0, "Device::cuda: device index must be >= 0, got ", index);
  return Device(DeviceType::CUDA, index);
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace hg
