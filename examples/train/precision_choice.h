// --precision auto: the precision that trains fastest on the device, and why; --precision amp.
#pragma once
#include <string>

#include "halfgrad.h"

namespace hg_train {

// "f16" on CUDA (tensor cores; GradScaler); on a CPU "bf16" only where it has native bf16 dot
// products (AVX512-BF16) and a bf16 GEMM measured here is at least as fast as an f32 one, else
// "f32": without them bf16 costs conversions and saves only memory.
std::string auto_precision(const hg::Device& device);

// One line saying why, with the bf16 / f32 GEMM speed measured on this CPU.
std::string auto_precision_reason(const hg::Device& device);

// --precision amp: mixed precision whatever its speed -- "f16" (with a GradScaler) on CUDA,
// "bf16" on a CPU -- and one line with what it costs or gains here.
std::string amp_precision(const hg::Device& device);
std::string amp_precision_reason(const hg::Device& device);

}  // namespace hg_train
