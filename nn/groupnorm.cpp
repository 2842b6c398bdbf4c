// nn::GroupNorm and nn::InstanceNorm2d.
#include "nn/groupnorm.h"

#include "autograd/grad_mode.h"
#include "ops/norm.h"

namespace hg::nn {

GroupNorm::GroupNorm(int64_t groups, int64_t channels, GroupNormOptions opts)
    : num_groups(groups), num_channels(channels), options(opts) {
  HG_CHECK(groups > 0 && channels > 0 && channels % groups == 0, "GroupNorm: num_groups (", groups,
           ") must be positive and divide num_channels (", channels, ")");
  if (opts.affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, options.eps); }

InstanceNorm2d::InstanceNorm2d(int64_t c, InstanceNormOptions opts) : num_features(c), options(opts) {
  HG_CHECK(c > 0, "InstanceNorm2d: num_features must be positive, got ", c);
  if (opts.affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (opts.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = i64}));
  }
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  HG_CHECK(x.dim() == 4, "InstanceNorm2d: expected 4-D input (N, C, H, W), got ", x.shape());
  const bool use_input_stats = is_training() || !options.track_running_stats;
  if (options.track_running_stats && is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(ones({}, {.dtype = i64, .device = num_batches_tracked.device()}));
  }
  return instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, options.momentum, options.eps);
}

}  // namespace hg::nn
