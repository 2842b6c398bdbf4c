// max_pool2d, avg_pool2d, adaptive_avg_pool2d and adaptive_max_pool2d: checks, autocast, the
// kernels of kernels/pool.h and one autograd node each. max_pool2d saves only the u8 window index
// of each maximum, adaptive_max_pool2d its i64 plane index.
#include "ops/pool.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/pool.h"
#include "ops/record.h"

namespace hg {

namespace {

void check_input(std::string_view op, const Tensor& x) {
  HG_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", x.shape());
  HG_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype());
}

// PyTorch's checks, then the geometry both devices run.
kernels::math::PoolGeometry pool_geometry(std::string_view op, const Tensor& x, int64_t kernel,
                                          std::optional<int64_t> stride_option, int64_t padding, bool ceil_mode,
                                          bool count_include_pad) {
  check_input(op, x);
  const int64_t stride = stride_option.value_or(kernel);
  HG_CHECK(kernel >= 1 && stride >= 1, op, ": kernel and stride must be >= 1, got ", kernel, " and ", stride);
  // The u8 window index of max_pool2d's backward holds kernel^2 <= 256 positions.
  HG_CHECK(kernel <= 16, op, ": kernels larger than 16x16 are not supported (got ", kernel, ")");
  HG_CHECK(padding >= 0 && padding <= kernel / 2, op, ": padding should be at most half the kernel (", kernel / 2,
           "), got ", padding);
  const Shape& s = x.shape();
  HG_CHECK(s[2] + 2 * padding >= kernel && s[3] + 2 * padding >= kernel, op, ": input ", s[2], "x", s[3],
           padding ? " with its padding" : "", " is smaller than the ", kernel, "x", kernel, " window");
  return kernels::math::pool_geometry(s[0], s[1], s[2], s[3], kernel, stride, padding, ceil_mode, count_include_pad);
}

}  // namespace

Tensor max_pool2d(const Tensor& input, MaxPool2dFuncOptions options) {
  auto [x0] = amp::prepare(amp::Op::MaxPool2d, input);
  const auto g = pool_geometry(amp::op_name(amp::Op::MaxPool2d), x0, options.kernel, options.stride, options.padding,
                               options.ceil_mode, true);
  const Tensor x = x0.contiguous();
  auto [out, where] = kernels::max_pool2d(x, g);
  record(amp::Op::MaxPool2d, out, {x}, [sw = SavedTensor(where), shape = x.shape(), g](const Tensor& grad)
         -> std::vector<Tensor> { return {kernels::max_pool2d_backward(grad.contiguous(), sw.get(), shape, g)}; });
  return out;
}

Tensor avg_pool2d(const Tensor& input, AvgPool2dFuncOptions options) {
  auto [x0] = amp::prepare(amp::Op::AvgPool2d, input);
  const auto g = pool_geometry(amp::op_name(amp::Op::AvgPool2d), x0, options.kernel, options.stride, options.padding,
                               options.ceil_mode, options.count_include_pad);
  const Tensor x = x0.contiguous();
  Tensor out = kernels::avg_pool2d(x, g);
  record(amp::Op::AvgPool2d, out, {x}, [shape = x.shape(), g](const Tensor& grad) -> std::vector<Tensor> {
    return {kernels::avg_pool2d_backward(grad.contiguous(), shape, g)};
  });
  return out;
}

namespace {

void check_adaptive(std::string_view name, const Tensor& x, const Shape& output_size) {
  check_input(name, x);
  HG_CHECK(output_size.size() == 2 && output_size[0] >= 1 && output_size[1] >= 1, name,
           ": output_size must be two positive sizes, got ", output_size);
  HG_CHECK(x.shape()[2] >= 1 && x.shape()[3] >= 1, name, ": input planes must not be empty, got ", x.shape());
}

}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input, Shape output_size) {
  auto [x0] = amp::prepare(amp::Op::AdaptiveAvgPool2d, input);
  check_adaptive(amp::op_name(amp::Op::AdaptiveAvgPool2d), x0, output_size);
  const Tensor x = x0.contiguous();
  Tensor out = kernels::adaptive_avg_pool2d(x, output_size[0], output_size[1]);
  record(amp::Op::AdaptiveAvgPool2d, out, {x}, [shape = x.shape()](const Tensor& grad) -> std::vector<Tensor> {
    return {kernels::adaptive_avg_pool2d_backward(grad.contiguous(), shape)};
  });
  return out;
}

Tensor adaptive_max_pool2d(const Tensor& input, Shape output_size) {
  auto [x0] = amp::prepare(amp::Op::AdaptiveMaxPool2d, input);
  check_adaptive(amp::op_name(amp::Op::AdaptiveMaxPool2d), x0, output_size);
  const Tensor x = x0.contiguous();
  auto [out, where] = kernels::adaptive_max_pool2d(x, output_size[0], output_size[1]);
  record(amp::Op::AdaptiveMaxPool2d, out, {x}, [sw = SavedTensor(where), shape = x.shape()](const Tensor& grad)
         -> std::vector<Tensor> { return {kernels::adaptive_max_pool2d_backward(grad.contiguous(), sw.get(), shape)}; });
  return out;
}

}  // namespace hg
