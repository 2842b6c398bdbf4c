// Normalisation per image, not per batch: nn::GroupNorm normalises each image's groups of
// channels (torch.nn.GroupNorm; weight ones and bias zeros per channel), nn::InstanceNorm2d each
// image's channels on their own (torch.nn.InstanceNorm2d: no affine and no running statistics by
// default). Neither depends on the batch size, which is why they suit small batches.
#pragma once
#include "nn/module.h"

namespace hg::nn {

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t num_groups, num_channels;
  GroupNormOptions options;
  Tensor weight, bias;  // (C), undefined without affine
};

struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;  // running_mean/var buffers, used in eval mode
};

class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {});
  Tensor forward(const Tensor& x) override;

  int64_t num_features;
  InstanceNormOptions options;
  Tensor weight, bias;                                   // (C), with affine
  Tensor running_mean, running_var, num_batches_tracked;  // with track_running_stats
};

}  // namespace hg::nn
