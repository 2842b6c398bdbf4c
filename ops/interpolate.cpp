// interpolate: checks, autocast (f32, PyTorch's list for upsample_*), the kernels of
// kernels/interpolate.h and one autograd node.
#include "ops/interpolate.h"

#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/interpolate.h"
#include "ops/record.h"

namespace hg {

namespace {

// PyTorch's output size from a scale factor: floor(in * factor), in double.
int64_t scaled_size(int64_t in, double factor) { return int64_t(std::floor(double(in) * factor)); }

}  // namespace

Tensor interpolate(const Tensor& input, InterpolateOptions options) {
  const std::string_view name = amp::op_name(amp::Op::Interpolate);
  auto [x0] = amp::prepare(amp::Op::Interpolate, input);
  HG_CHECK(x0.dim() == 4, name, ": input must be 4-D (N, C, H, W), got ", x0.shape());
  HG_CHECK(is_floating(x0.dtype()), name, ": expected a floating tensor, got ", x0.dtype());
  HG_CHECK(options.mode == "nearest" || options.mode == "bilinear", name,
           ": mode must be \"nearest\" or \"bilinear\", got \"", options.mode, "\"");
  const bool bilinear = options.mode == "bilinear";
  HG_CHECK(bilinear || !options.align_corners.has_value(), name,
           ": align_corners can only be set with mode \"bilinear\" (nearest has no corners to align)");
  HG_CHECK(options.size.has_value() != options.scale_factor.has_value(), name,
           ": give either size or scale_factor, not ", options.size ? "both" : "neither");
  const int64_t H = x0.shape()[2], W = x0.shape()[3];
  HG_CHECK(H >= 1 && W >= 1, name, ": input planes must not be empty, got ", x0.shape());
  int64_t OH = 0, OW = 0;
  double factor = 0;
  if (options.size) {
    HG_CHECK(options.size->size() == 2 && (*options.size)[0] >= 1 && (*options.size)[1] >= 1, name,
             ": size must be two positive sizes (out_h, out_w), got ", *options.size);
    OH = (*options.size)[0];
    OW = (*options.size)[1];
  } else {
    factor = *options.scale_factor;
    HG_CHECK(std::isfinite(factor) && factor > 0, name, ": scale_factor must be positive and finite, got ", factor);
    OH = scaled_size(H, factor);
    OW = scaled_size(W, factor);
    HG_CHECK(OH >= 1 && OW >= 1, name, ": scale_factor ", factor, " leaves an empty output from ", H, "x", W);
  }
  const bool align = options.align_corners.value_or(false);
  const kernels::math::Resize r{{H, OH, kernels::math::resize_scale(H, OH, align, factor), align},
                                {W, OW, kernels::math::resize_scale(W, OW, align, factor), align},
                                bilinear};
  const Tensor x = x0.contiguous();
  Tensor out = kernels::interpolate(x, r);
  record(amp::Op::Interpolate, out, {x}, [shape = x.shape(), r](const Tensor& grad) -> std::vector<Tensor> {
    return {kernels::interpolate_backward(grad.contiguous(), shape, r)};
  });
  return out;
}

}  // namespace hg
