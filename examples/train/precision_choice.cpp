// --precision auto (see precision_choice.h). The speed ratio is measured, not assumed: a few
// 256^3 products in f32 and bf16 take a few milliseconds.
#include "train/precision_choice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace hg_train {

namespace {

// Seconds of the fastest of 5 products a @ b in `dtype` (after one warm-up).
double gemm_seconds(hg::DType dtype) {
  hg::NoGradGuard no_grad;
  const hg::Tensor a = hg::randn({256, 256}).to(dtype), b = hg::randn({256, 256}).to(dtype);
  hg::matmul(a, b);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    hg::matmul(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

std::string auto_precision(const hg::Device& device) {
  if (device.is_cuda()) return "f16";
  return hg::cpu::has_native_bf16() ? "bf16" : "f32";
}

std::string auto_precision_reason(const hg::Device& device) {
  if (device.is_cuda()) return "f16 with a GradScaler on CUDA (tensor cores)";
  const double speedup = gemm_seconds(hg::f32) / gemm_seconds(hg::bf16);
  char line[256];
  if (hg::cpu::has_native_bf16())
    std::snprintf(line, sizeof line, "this CPU (%s) has native bf16 dot products: a bf16 GEMM runs at %.1fx the f32 rate "
                  "here, training in bf16", hg::cpu::isa_summary().c_str(), speedup);
  else
    std::snprintf(line, sizeof line, "this CPU (%s) has no native bf16 arithmetic: a bf16 GEMM runs at %.2fx the f32 rate "
                  "here (conversions, no faster products), training in f32", hg::cpu::isa_summary().c_str(), speedup);
  return line;
}

}  // namespace hg_train
