// nn::Conv2d.
#include "nn/conv.h"

#include <cmath>

#include "nn/init.h"
#include "ops/conv.h"

namespace hg::nn {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, Conv2dOptions opts)
    : in_channels(in), out_channels(out), kernel_size(kernel), options(opts) {
  HG_CHECK(in > 0 && out > 0 && kernel > 0, "Conv2d: channels and kernel size must be positive, got ", in, ", ", out,
           ", ", kernel);
  HG_CHECK(opts.groups >= 1 && in % opts.groups == 0 && out % opts.groups == 0, "Conv2d: groups (", opts.groups,
           ") must be positive and divide the input channels (", in, ") and the output channels (", out, ")");
  weight = register_parameter("weight", empty({out, in / opts.groups, kernel, kernel}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (opts.bias) {
    bias = register_parameter("bias", empty({out}));
    const double bound = 1.0 / std::sqrt(double(init::fan_in(weight)));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias,
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation, .groups = options.groups});
}

}  // namespace hg::nn
