// Losses, both with mean reduction.
//
// cross_entropy(logits (N, C), targets i64 (N)): the mean over non-ignored samples of
// -log softmax(logits)[target], with optional label smoothing (PyTorch's formula:
// (1 - eps) * nll + eps * mean over classes of -log p). A target outside [0, C) that is not
// ignore_index is an hg::Error: thrown by the call on the CPU; on a GPU the kernel finds it and
// the next synchronisation (loss.item(), a StepResult, hg::cuda::synchronize()) throws it, so the
// call never waits for the GPU. With no non-ignored sample (empty batch, or every target ignored)
// the mean is 0/0 = NaN, as in PyTorch.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

struct CrossEntropyOptions {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});
Tensor mse_loss(const Tensor& a, const Tensor& b);

}  // namespace hg
