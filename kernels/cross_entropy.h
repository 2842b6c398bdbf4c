// The cross-entropy kernels (fused log-softmax + negative log-likelihood with label smoothing) of
// ops/loss.cpp, on the logits' device. The row formulas are kernels/math/cross_entropy.h, which the
// CPU loops here and the CUDA kernels share. They record nothing.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg::kernels {

// How many rows count towards the mean (their target is not ignore_index).
struct CrossEntropyRows {
  int64_t count = 0;  // CPU: the targets are checked and counted on the host, at once
  Tensor on_device;   // CUDA: checked and counted by the kernel (0-d i64), so the call never waits
                      // for the GPU; a bad target is an hg::Error at the next synchronisation
};

struct CrossEntropyResult {
  Tensor loss;  // 0-d, the mean over the rows that count (0/0 = NaN when none does, as PyTorch)
  CrossEntropyRows rows;
};

// logits (N, C) contiguous floating, targets (N) contiguous i64 on the same device.
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, double smoothing, int64_t ignore_index);
// d(loss)/d(logits) times the 0-d upstream gradient g.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& g, double smoothing,
                              int64_t ignore_index, const CrossEntropyRows& rows);

}  // namespace hg::kernels
