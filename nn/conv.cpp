// nn::Conv2d, nn::Conv1d and nn::ConvTranspose2d.
#include "nn/conv.h"

#include <cmath>

#include "nn/init.h"
#include "ops/conv.h"

namespace hg::nn {

namespace {

void check_channels(std::string_view module, int64_t in, int64_t out, int64_t kernel, int64_t groups) {
  HG_CHECK(in > 0 && out > 0 && kernel > 0, module, ": channels and kernel size must be positive, got ", in, ", ", out,
           ", ", kernel);
  HG_CHECK(groups >= 1 && in % groups == 0 && out % groups == 0, module, ": groups (", groups,
           ") must be positive and divide the input channels (", in, ") and the output channels (", out, ")");
}

// PyTorch's initialisation of every convolution, from the weight's fan-in (dim 1 times the kernel).
void init_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::fan_in(weight)));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, Conv2dOptions opts)
    : in_channels(in), out_channels(out), kernel_size(kernel), options(opts) {
  check_channels("Conv2d", in, out, kernel, opts.groups);
  weight = register_parameter("weight", empty({out, in / opts.groups, kernel, kernel}));
  if (opts.bias) bias = register_parameter("bias", empty({out}));
  init_conv(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias,
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation, .groups = options.groups});
}

Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, Conv1dOptions opts)
    : in_channels(in), out_channels(out), kernel_size(kernel), options(opts) {
  check_channels("Conv1d", in, out, kernel, opts.groups);
  weight = register_parameter("weight", empty({out, in / opts.groups, kernel}));
  if (opts.bias) bias = register_parameter("bias", empty({out}));
  init_conv(weight, bias);
}

Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias,
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation, .groups = options.groups});
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, int64_t kernel, ConvTranspose2dOptions opts)
    : in_channels(in), out_channels(out), kernel_size(kernel), options(opts) {
  check_channels("ConvTranspose2d", in, out, kernel, opts.groups);
  weight = register_parameter("weight", empty({in, out / opts.groups, kernel, kernel}));
  if (opts.bias) bias = register_parameter("bias", empty({out}));
  init_conv(weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias,
                          {.stride = options.stride, .padding = options.padding, .output_padding = options.output_padding,
                           .groups = options.groups, .dilation = options.dilation});
}

}  // namespace hg::nn
