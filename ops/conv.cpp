// conv2d (+ its ReLU epilogue): checks, autocast, the kernels of kernels/conv.h (im2col + GEMM on
// the CPU, cuDNN on a GPU) and one autograd node.
#include "ops/conv.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/conv.h"
#include "ops/elementwise.h"
#include "ops/record.h"

namespace hg {


namespace {

using kernels::ConvGeometry;

ConvGeometry check_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dFuncOptions& options) {
  HG_CHECK(x.dim() == 4, "conv2d: input must be 4-D (N, C, H, W), got ", x.shape());
  HG_CHECK(w.dim() == 4, "conv2d: weight must be 4-D (out_channels, in_channels / groups, kh, kw), got ", w.shape());
  HG_CHECK(options.stride >= 1 && options.padding >= 0 && options.dilation >= 1,
           "conv2d: stride and dilation must be >= 1 and padding >= 0, got stride ", options.stride, ", padding ",
           options.padding, " and dilation ", options.dilation);
  const int64_t groups = options.groups, C = x.shape()[1], O = w.shape()[0];
  HG_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  HG_CHECK(C % groups == 0 && O % groups == 0, "conv2d: groups (", groups, ") must divide the input channels (", C,
           ") and the output channels (", O, ")");
  HG_CHECK(w.shape()[1] * groups == C, "conv2d: input has ", C, " channels (shape ", x.shape(), ") but the weight (shape ",
           w.shape(), ") with groups = ", groups, " expects ", w.shape()[1] * groups);
  if (b.defined())
    HG_CHECK(b.dim() == 1 && b.shape()[0] == O, "conv2d: bias must have shape [", O, "], got ", b.shape());
  ConvGeometry g{.N = x.shape()[0], .C = C, .H = x.shape()[2], .W = x.shape()[3], .O = O, .kh = w.shape()[2],
                 .kw = w.shape()[3], .stride = options.stride, .pad = options.padding, .OH = 0, .OW = 0,
                 .dilation = options.dilation, .groups = groups};
  // The span a dilated kernel covers: dilation * (k - 1) + 1 pixels.
  const int64_t extent_h = g.dilation * (g.kh - 1) + 1, extent_w = g.dilation * (g.kw - 1) + 1;
  const int64_t span_h = g.H + 2 * g.pad - extent_h, span_w = g.W + 2 * g.pad - extent_w;
  HG_CHECK(span_h >= 0 && span_w >= 0, "conv2d: the padded input (", g.H + 2 * g.pad, "x", g.W + 2 * g.pad,
           ") is smaller than the kernel (", extent_h, "x", extent_w, g.dilation > 1 ? " with its dilation" : "", ")");
  g.OH = span_h / g.stride + 1;
  g.OW = span_w / g.stride + 1;
  return g;
}

}  // namespace

// ---- conv2d (+ its ReLU epilogue) --------------------------------------------------------------

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv2dFuncOptions options) {
  const std::string_view name = amp::op_name(amp::Op::Conv2d);  // the report row, even with an epilogue
  const bool relu = options.epilogue == Epilogue::Relu;
  auto [x0, w0, b0] = amp::prepare(amp::Op::Conv2d, x_in, w_in, b_in);
  detail::check_same_device(name, x0, w0);
  if (b0.defined()) detail::check_same_device(name, x0, b0);
  const ConvGeometry g = check_conv(x0, w0, b0, options);
  DType dtype = promote_types(x0.dtype(), w0.dtype());
  if (b0.defined()) dtype = promote_types(dtype, b0.dtype());
  HG_CHECK(is_floating(dtype), name, ": expected floating tensors, got ", x0.dtype(), " and ", w0.dtype());
  const Tensor x = x0.to(dtype).contiguous(), w = w0.to(dtype).contiguous();
  const Tensor b = b0.defined() ? b0.to(dtype) : Tensor();

  Tensor out = kernels::conv2d(x, w, b, g, relu);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  record(amp::Op::Conv2d, out, {x, w, b},
         [sx = SavedTensor(x), sw = SavedTensor(need_x ? w : Tensor()),
          sy = SavedTensor(relu ? out : Tensor()), g, need_x, need_w,
          need_b](const Tensor& grad) -> std::vector<Tensor> {
           auto [gx, gw, gb] = kernels::conv2d_backward(sx.get(), sw.get(), grad, sy.get(), g, need_x, need_w, need_b);
           return {gx, gw, gb};
         });
  return out;
}

}  // namespace hg
