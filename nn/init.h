// Parameter initialisation, PyTorch's torch.nn.init: each function fills a tensor in place
// (under NoGradGuard) from the default Philox generator, so hg::manual_seed makes it reproducible.
//
//   hg::nn::init::kaiming_uniform_(w, std::sqrt(5.0));   // Linear/Conv2d's default for weights
#pragma once
#include <string_view>

#include "core/tensor.h"

namespace hg::nn::init {

const Tensor& uniform_(const Tensor& t, double low = 0.0, double high = 1.0);
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
const Tensor& constant_(const Tensor& t, double value);
const Tensor& zeros_(const Tensor& t);
const Tensor& ones_(const Tensor& t);

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (for >= 2-D tensors).
int64_t fan_in(const Tensor& t);
int64_t fan_out(const Tensor& t);
// The recommended gain: "linear"/"sigmoid"/"conv2d" 1, "tanh" 5/3, "relu" sqrt(2),
// "leaky_relu" sqrt(2 / (1 + slope^2)).
double calculate_gain(std::string_view nonlinearity, double param = 0.01);

// He et al.: std = gain / sqrt(fan); uniform bound = sqrt(3) * std. `a` is leaky_relu's slope.
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, bool use_fan_in = true,
                               std::string_view nonlinearity = "leaky_relu");
const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, bool use_fan_in = true,
                              std::string_view nonlinearity = "leaky_relu");
// Glorot & Bengio: std = gain * sqrt(2 / (fan_in + fan_out)).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0);
const Tensor& xavier_normal_(const Tensor& t, double gain = 1.0);

}  // namespace hg::nn::init
