// --precision auto (see precision_choice.h). The speed ratio is measured, not assumed: a few
// 256^3 products in f32 and bf16 take a few milliseconds.
#include "train/precision_choice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace hg_train {

namespace {

// Seconds of the fastest of 10 products a @ b in `dtype` (after one warm-up).
double gemm_seconds(hg::DType dtype) {
  hg::NoGradGuard no_grad;
  const hg::Tensor a = hg::randn({256, 256}).to(dtype), b = hg::randn({256, 256}).to(dtype);
  hg::matmul(a, b);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    hg::matmul(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// The bf16 GEMM rate over the f32 rate on this CPU, measured once per process.
double bf16_speedup() {
  static const double speedup = gemm_seconds(hg::f32) / gemm_seconds(hg::bf16);
  return speedup;
}

}  // namespace

std::string auto_precision(const hg::Device& device) {
  if (device.is_cuda()) return "f16";
  // Native bf16 dot products are not always faster: AMD Zen 4 runs vdpbf16ps at twice the f32
  // FMA rate, Intel Sapphire Rapids at half of it. So the measurement decides.
  return hg::cpu::has_native_bf16() && bf16_speedup() >= 1.0 ? "bf16" : "f32";
}

std::string auto_precision_reason(const hg::Device& device) {
  if (device.is_cuda()) return "f16 with a GradScaler on CUDA (tensor cores)";
  const double speedup = bf16_speedup();
  char line[256];
  if (hg::cpu::has_native_bf16() && speedup >= 1.0)
    std::snprintf(line, sizeof line, "this CPU (%s) has native bf16 dot products: a bf16 GEMM runs at %.1fx the f32 rate "
                  "here, training in bf16", hg::cpu::isa_summary().c_str(), speedup);
  else if (hg::cpu::has_native_bf16())
    std::snprintf(line, sizeof line, "this CPU (%s) has native bf16 dot products, but a bf16 GEMM runs at only %.2fx the "
                  "f32 rate here, training in f32 (--precision bf16 halves activation memory)",
                  hg::cpu::isa_summary().c_str(), speedup);
  else
    std::snprintf(line, sizeof line, "this CPU (%s) has no native bf16 arithmetic: a bf16 GEMM runs at %.2fx the f32 rate "
                  "here (conversions, no faster products), training in f32", hg::cpu::isa_summary().c_str(), speedup);
  return line;
}

std::string amp_precision(const hg::Device& device) { return device.is_cuda() ? "f16" : "bf16"; }

std::string amp_precision_reason(const hg::Device& device) {
  if (device.is_cuda()) return "f16 autocast with a GradScaler on CUDA (tensor cores)";
  char line[256];
  std::snprintf(line, sizeof line, "bf16 autocast on the CPU (%s, %s bf16 dot products): a bf16 GEMM runs at %.2fx the "
                "f32 rate here; activations saved for backward take about half the memory",
                hg::cpu::isa_summary().c_str(), hg::cpu::has_native_bf16() ? "native" : "no native", bf16_speedup());
  return line;
}

}  // namespace hg_train
