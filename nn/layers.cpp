// The parameter-free modules.
#include "nn/layers.h"

#include "ops/dropout.h"
#include "ops/pool.h"

namespace hg::nn {

Dropout::Dropout(double p_) : p(p_) { HG_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

MaxPool2d::MaxPool2d(int k, int s) : MaxPool2d(MaxPool2dFuncOptions{.kernel = k, .stride = s == 0 ? k : s}) {}
MaxPool2d::MaxPool2d(MaxPool2dFuncOptions o)
    : options(o), kernel_size(int(o.kernel)), stride(int(o.stride.value_or(o.kernel))) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, options); }

AvgPool2d::AvgPool2d(int k, int s) : AvgPool2d(AvgPool2dFuncOptions{.kernel = k, .stride = s == 0 ? k : s}) {}
AvgPool2d::AvgPool2d(AvgPool2dFuncOptions o)
    : options(o), kernel_size(int(o.kernel)), stride(int(o.stride.value_or(o.kernel))) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, options); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Shape size) : output_size(std::move(size)) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Shape size) : output_size(std::move(size)) {}
Tensor AdaptiveMaxPool2d::forward(const Tensor& x) { return adaptive_max_pool2d(x, output_size); }

Upsample::Upsample(InterpolateOptions o) : options(std::move(o)) {}
Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options); }

Flatten::Flatten(int start, int end) : start_dim(start), end_dim(end) {}
Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim, end_dim); }

}  // namespace hg::nn
