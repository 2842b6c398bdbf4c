// nn::BatchNorm2d and nn::BatchNorm1d.
#include "nn/batchnorm.h"

#include <limits>

#include "autograd/grad_mode.h"
#include "ops/norm.h"

namespace hg::nn {

BatchNorm::BatchNorm(std::string_view name, int64_t c, BatchNormOptions opts) : num_features(c), options(opts) {
  HG_CHECK(c > 0, name, ": num_features must be positive, got ", c);
  if (opts.affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  running_mean = register_buffer("running_mean", zeros({c}));
  running_var = register_buffer("running_var", ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = i64}));
}

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions opts) : BatchNorm("BatchNorm2d", c, opts) {}
void BatchNorm2d::check_input(const Tensor& x) const {
  HG_CHECK(x.dim() == 4, "BatchNorm2d: expected 4-D input (N, C, H, W), got ", x.shape());
}

BatchNorm1d::BatchNorm1d(int64_t c, BatchNormOptions opts) : BatchNorm("BatchNorm1d", c, opts) {}
void BatchNorm1d::check_input(const Tensor& x) const {
  HG_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expected 2-D or 3-D input (N, C) or (N, C, L), got ", x.shape());
}

Tensor BatchNorm::forward(const Tensor& x) { return forward(x, Epilogue::None); }

Tensor BatchNorm::forward(const Tensor& x, Epilogue epilogue, const Tensor& residual) {
  check_input(x);
  if (is_training()) {
    NoGradGuard no_grad;
    if (num_batches_tracked.device().is_cuda()) {
      // += 1 where the counter lives: reading it on the host would wait for a GPU every step.
      num_batches_tracked.add_(ones({}, {.dtype = i64, .device = num_batches_tracked.device()}));
    } else {
      // NOTE: the count may come from a checkpoint (any i64): it saturates instead of overflowing,
      // and is written as an integer (through a double it would round above 2^53).
      const int64_t tracked = num_batches_tracked.item<int64_t>();
      const int64_t next = tracked < std::numeric_limits<int64_t>::max() ? tracked + 1 : tracked;
      num_batches_tracked.copy_(from_vector(std::vector<int64_t>{next}, {}));
    }
  }
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), options.momentum, options.eps, epilogue,
                    residual);
}

}  // namespace hg::nn
