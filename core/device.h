// hg::Device names where a tensor lives: the CPU or one CUDA device. The hg::cuda functions
// answer "is there a GPU?" on every build; without one (or built without CUDA) is_available()
// is false and nothing throws.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace hg {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static Device cuda(int index = 0);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

namespace cuda {
bool is_available();   // false without a driver, without a device, or in a CPU-only build
int device_count();    // 0 in those cases
void synchronize();    // waits for all work on the current device; no-op without CUDA
bool built_with_cuda();
}  // namespace cuda

}  // namespace hg

namespace hg::cuda {
void empty_cache();                         // returns cached, unused device memory to the driver
int64_t memory_reserved(int device_index = 0);  // bytes the caching allocator holds from the driver
// How many times the library made the host wait for a GPU so far (a copy to or from host memory,
// synchronize(), a cudaFree, HG_CUDA_SYNC=1's check after each launch). Compare two readings to
// see what a piece of code costs: a training step with GradScaler::step_async costs 0, reading a
// StepResult costs 1. Always 0 in a CPU-only build.
int64_t sync_count();
}  // namespace hg::cuda
