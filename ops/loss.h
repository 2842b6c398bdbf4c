// Losses, PyTorch's (torch.nn.functional), each with `.reduction` = "mean" (default), "sum" or
// "none" (the per-element losses, in the input's shape). Scalar losses are 0-d.
//
// cross_entropy(logits (N, C), targets i64 (N)): the mean over non-ignored samples of
// -log softmax(logits)[target], with optional label smoothing (PyTorch's formula:
// (1 - eps) * nll + eps * mean over classes of -log p). A target outside [0, C) that is not
// ignore_index is an hg::Error: thrown by the call on the CPU; on a GPU the kernel finds it and
// the next synchronisation (loss.item(), a StepResult, hg::cuda::synchronize()) throws it, so the
// call never waits for the GPU. With no non-ignored sample (empty batch, or every target ignored)
// the mean is 0/0 = NaN, as in PyTorch.
//
// cross_entropy also takes (N, C, d1, ...) logits with (N, d1, ...) targets, a per-class
// `.weight` (the mean is then weighted: sum(w[t] loss) / sum(w[t])) and any reduction; the fused
// kernel runs the common case (2-D, mean, no weight), the others are composed from log_softmax
// and nll_loss. (Fields keep halfgrad's earlier order, label_smoothing first, so existing
// designated initialisers still compile; PyTorch's order puts weight first.)
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace hg {

struct CrossEntropyOptions {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  Tensor weight = {};              // (C): a weight per class
  std::string reduction = "mean";
};

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});

struct NLLLossOptions {
  Tensor weight = {};  // (C)
  int64_t ignore_index = -100;
  std::string reduction = "mean";
};
// -log_probs[target] (log_probs (N, C) or (N, C, d1, ...), targets i64 (N) or (N, d1, ...)),
// times weight[target]; ignored targets count 0 (and are left out of the mean). A target outside
// [0, C) that is not ignore_index is an hg::Error.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options = {});

struct MSELossOptions {
  std::string reduction = "mean";
};
Tensor mse_loss(const Tensor& a, const Tensor& b, MSELossOptions options = {});

struct L1LossOptions {
  std::string reduction = "mean";
};
Tensor l1_loss(const Tensor& input, const Tensor& target, L1LossOptions options = {});  // |input - target|

struct SmoothL1LossOptions {
  std::string reduction = "mean";
  double beta = 1.0;
};
// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta = 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1LossOptions options = {});

struct HuberLossOptions {
  std::string reduction = "mean";
  double delta = 1.0;
};
// 0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, HuberLossOptions options = {});

struct BCELossOptions {
  Tensor weight = {};  // broadcast to the input
  std::string reduction = "mean";
};
// -(y log p + (1 - y) log(1 - p)), each log clamped at -100 (PyTorch's), for probabilities p.
// Under autocast it runs in f32 (PyTorch's CPU list; its CUDA list bans it instead).
Tensor binary_cross_entropy(const Tensor& probabilities, const Tensor& target, BCELossOptions options = {});

struct BCEWithLogitsLossOptions {
  Tensor weight = {};
  std::string reduction = "mean";
  Tensor pos_weight = {};  // broadcast along the last dimension: weights the positive term
};
// binary_cross_entropy(sigmoid(x), y), computed stably from the logits x.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        BCEWithLogitsLossOptions options = {});

struct KLDivLossOptions {
  std::string reduction = "mean";  // also "batchmean": the sum divided by the batch size (the KL divergence)
  bool log_target = false;
};
// target * (log(target) - input) for log-probabilities `input` (0 where target is 0); with
// log_target, exp(target) * (target - input).
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivLossOptions options = {});

}  // namespace hg
