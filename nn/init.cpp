// Initialisers (see init.h).
#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/rng.h"
#include "ops/elementwise.h"

namespace hg::nn::init {

namespace {
const Tensor& fill_from(const Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  Tensor(t).copy_(values);
  return t;
}
int64_t receptive_field(const Tensor& t) {
  HG_CHECK(t.dim() >= 2, "init: fan in/out needs a tensor with at least 2 dimensions, got ", t.shape());
  int64_t r = 1;
  for (int d = 2; d < t.dim(); ++d) r *= t.shape()[d];
  return r;
}
}  // namespace

const Tensor& uniform_(const Tensor& t, double low, double high) {
  return fill_from(t, rand(t.shape(), {.dtype = f64}) * (high - low) + low);
}

const Tensor& normal_(const Tensor& t, double mean, double std) {
  return fill_from(t, randn(t.shape(), {.dtype = f64}) * std + mean);
}

const Tensor& constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  Tensor(t).fill_(value);
  return t;
}
const Tensor& zeros_(const Tensor& t) { return constant_(t, 0.0); }
const Tensor& ones_(const Tensor& t) { return constant_(t, 1.0); }

// NOTE: receptive_field (which checks the rank) runs first, before shape()[1] is read.
int64_t fan_in(const Tensor& t) {
  const int64_t field = receptive_field(t);
  return t.shape()[1] * field;
}
int64_t fan_out(const Tensor& t) {
  const int64_t field = receptive_field(t);
  return t.shape()[0] * field;
}

double calculate_gain(std::string_view nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity == "conv2d") return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  HG_FAIL("calculate_gain: unknown nonlinearity \"", nonlinearity, "\"");
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, bool use_fan_in, std::string_view nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(use_fan_in ? fan_in(t) : fan_out(t)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, bool use_fan_in, std::string_view nonlinearity) {
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(double(use_fan_in ? fan_in(t) : fan_out(t))));
}

const Tensor& xavier_uniform_(const Tensor& t, double gain) {
  const double std = gain * std::sqrt(2.0 / double(fan_in(t) + fan_out(t)));
  return uniform_(t, -std::sqrt(3.0) * std, std::sqrt(3.0) * std);
}

const Tensor& xavier_normal_(const Tensor& t, double gain) {
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in(t) + fan_out(t))));
}

}  // namespace hg::nn::init
