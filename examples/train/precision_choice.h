// --precision auto: the precision that trains fastest on the device, and why.
#pragma once
#include <string>

#include "halfgrad.h"

namespace hg_train {

// "f16" on CUDA (tensor cores; GradScaler); on a CPU "bf16" only where it has native bf16 dot
// products (AVX512-BF16), else "f32": without them bf16 costs conversions and saves only memory.
std::string auto_precision(const hg::Device& device);

// One line saying why, with the bf16 / f32 GEMM speed measured on this CPU.
std::string auto_precision_reason(const hg::Device& device);

}  // namespace hg_train
