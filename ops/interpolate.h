// Resizing images: PyTorch's torch.nn.functional.interpolate on NCHW tensors, in two modes.
//   nearest   output (oh, ow) copies input (floor(oh * scale_h), floor(ow * scale_w)): PyTorch's
//             legacy "nearest" (scale = in / out, or 1 / scale_factor)
//   bilinear  the weighted mean of the four nearest inputs, pixel centres aligned
//             (align_corners = false, the default) or corner pixels aligned (true)
// Give either the output size or one scale factor for both sides (output = floor(in * factor)).
//
//   hg::interpolate(x, {.scale_factor = 2.0})                         // nearest, 2x
//   hg::interpolate(x, {.size = hg::Shape{14, 14}, .mode = "bilinear"})
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"

namespace hg {

struct InterpolateOptions {
  std::optional<Shape> size = {};           // (out_h, out_w)
  std::optional<double> scale_factor = {};  // > 0, the same on both sides
  std::string mode = "nearest";             // "nearest" or "bilinear"
  std::optional<bool> align_corners = {};   // bilinear only; false when left out
};

Tensor interpolate(const Tensor& x, InterpolateOptions options);

}  // namespace hg
