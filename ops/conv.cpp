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
  HG_CHECK(w.dim() == 4, "conv2d: weight must be 4-D (out_channels, in_channels, kh, kw), got ", w.shape());
  HG_CHECK(x.shape()[1] == w.shape()[1], "conv2d: input has ", x.shape()[1], " channels (shape ", x.shape(),
           ") but the weight expects ", w.shape()[1], " (weight shape ", w.shape(), ")");
  HG_CHECK(options.stride >= 1 && options.padding >= 0, "conv2d: stride must be >= 1 and padding >= 0, got stride ",
           options.stride, " and padding ", options.padding);
  if (b.defined())
    HG_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0], "conv2d: bias must have shape [", w.shape()[0], "], got ",
             b.shape());
  ConvGeometry g{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[2], w.shape()[3],
                 options.stride, options.padding, 0, 0};
  const int64_t span_h = g.H + 2 * g.pad - g.kh, span_w = g.W + 2 * g.pad - g.kw;
  HG_CHECK(span_h >= 0 && span_w >= 0, "conv2d: the padded input (", g.H + 2 * g.pad, "x", g.W + 2 * g.pad,
           ") is smaller than the kernel (", g.kh, "x", g.kw, ")");
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
