// conv2d (+ its ReLU epilogue), conv1d and conv_transpose2d: checks, autocast, the kernels of
// kernels/conv.h (im2col + GEMM on the CPU, cuDNN on a GPU) and one autograd node each. conv1d is
// a conv2d of height 1; conv_transpose2d runs conv2d's kernels with the roles swapped (its
// forward is conv2d's input gradient, its input gradient is conv2d's forward).
#include "ops/conv.h"

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/copy.h"
#include "kernels/conv.h"
#include "kernels/reduce.h"
#include "ops/fp8_ops.h"
#include "ops/shape.h"
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

// The operands on one device in one floating dtype (their promotion), x and w contiguous: what
// the kernels take.
struct Operands {
  Tensor x, w, b;
};

Operands same_device_and_dtype(std::string_view name, const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  detail::check_same_device(name, x0, w0);
  if (b0.defined()) detail::check_same_device(name, x0, b0);
  DType dtype = promote_types(x0.dtype(), w0.dtype());
  if (b0.defined()) dtype = promote_types(dtype, b0.dtype());
  HG_CHECK(is_floating(dtype), name, ": expected floating tensors, got ", x0.dtype(), " and ", w0.dtype());
  return {x0.to(dtype).contiguous(), w0.to(dtype).contiguous(), b0.defined() ? b0.to(dtype) : Tensor()};
}

}  // namespace

// ---- conv2d (+ its ReLU epilogue) --------------------------------------------------------------

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv2dFuncOptions options) {
  const std::string_view name = amp::op_name(amp::Op::Conv2d);  // the report row, even with an epilogue
  const bool relu = options.epilogue == Epilogue::Relu;
  HG_CHECK(options.epilogue != Epilogue::Gelu, name,
           ": the Gelu epilogue is linear's only (write gelu(conv2d(...)))");
  HG_CHECK(options.epilogue != Epilogue::Relu6, name,
           ": the Relu6 epilogue is batch_norm's only (write relu6(conv2d(...)))");
  if (amp::fp8_enabled())  // (ops/fp8_ops.h)
    return amp::detail::fp8_conv2d(x_in, w_in, b_in, options.stride, options.padding, options.dilation,
                                   options.groups, relu);
  auto [x0, w0, b0] = amp::prepare(amp::Op::Conv2d, x_in, w_in, b_in);
  const ConvGeometry g = check_conv(x0, w0, b0, options);
  const auto [x, w, b] = same_device_and_dtype(name, x0, w0, b0);

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

// ---- conv1d: a conv2d of height 1 ---------------------------------------------------------------

Tensor conv1d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv1dFuncOptions options) {
  const std::string_view name = amp::op_name(amp::Op::Conv1d);
  auto [x0, w0, b0] = amp::prepare(amp::Op::Conv1d, x_in, w_in, b_in);
  HG_CHECK(x0.dim() == 3, name, ": input must be 3-D (N, C, L), got ", x0.shape());
  HG_CHECK(w0.dim() == 3, name, ": weight must be 3-D (out_channels, in_channels / groups, k), got ", w0.shape());
  HG_CHECK(options.stride >= 1 && options.padding >= 0 && options.dilation >= 1, name,
           ": stride and dilation must be >= 1 and padding >= 0, got stride ", options.stride, ", padding ",
           options.padding, " and dilation ", options.dilation);
  const int64_t N = x0.shape()[0], C = x0.shape()[1], L = x0.shape()[2];
  const int64_t O = w0.shape()[0], Cg = w0.shape()[1], k = w0.shape()[2], groups = options.groups, p = options.padding;
  HG_CHECK(groups >= 1 && C % groups == 0 && O % groups == 0, name, ": groups (", groups,
           ") must be >= 1 and divide the input channels (", C, ") and the output channels (", O, ")");
  HG_CHECK(Cg * groups == C, name, ": input has ", C, " channels (shape ", x0.shape(), ") but the weight (shape ",
           w0.shape(), ") with groups = ", groups, " expects ", Cg * groups);
  if (b0.defined()) HG_CHECK(b0.dim() == 1 && b0.shape()[0] == O, name, ": bias must have shape [", O, "], got ", b0.shape());
  const int64_t extent = options.dilation * (k - 1) + 1;
  HG_CHECK(L + 2 * p >= extent, name, ": the padded input (length ", L + 2 * p, ") is shorter than the kernel (",
           extent, options.dilation > 1 ? " with its dilation" : "", ")");
  const auto [x, w, b] = same_device_and_dtype(name, x0, w0, b0);

  // ConvGeometry pads rows and columns alike, so the input is padded along L here and the 2-D
  // convolution runs unpadded: (N, C, 1, L + 2p) against a (O, C / groups, 1, k) weight.
  const kernels::ConvGeometry g{.N = N, .C = C, .H = 1, .W = L + 2 * p, .O = O, .kh = 1, .kw = k,
                                .stride = options.stride, .pad = 0, .OH = 1,
                                .OW = (L + 2 * p - extent) / options.stride + 1, .dilation = options.dilation,
                                .groups = groups};
  Tensor x4, w4;
  {
    NoGradGuard no_grad;  // layout only: the node recorded below is conv1d's
    x4 = p == 0 ? x.reshape({N, C, 1, L}) : zeros({N, C, 1, L + 2 * p}, x.options());
    if (p > 0) detail::copy_into(narrow(x4, 3, p, L), x.reshape({N, C, 1, L}));
    w4 = w.reshape({O, Cg, 1, k});
  }
  Tensor out = kernels::conv2d(x4, w4, b, g, false).reshape({N, O, g.OW});
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  record(amp::Op::Conv1d, out, {x, w, b},
         [sx = SavedTensor(x4), sw = SavedTensor(need_x ? w4 : Tensor()), g, p, L, k, need_x, need_w,
          need_b](const Tensor& grad) -> std::vector<Tensor> {
           NoGradGuard no_grad;
           const Tensor grad4 = grad.contiguous().reshape({g.N, g.O, 1, g.OW});
           auto [gx, gw, gb] = kernels::conv2d_backward(sx.get(), sw.get(), grad4, Tensor(), g, need_x, need_w, need_b);
           if (gx.defined()) gx = narrow(gx.reshape({g.N, g.C, g.W}), 2, p, L).contiguous();
           if (gw.defined()) gw = gw.reshape({g.O, g.group_in(), k});
           return {gx, gw, gb};
         });
  return out;
}

// ---- conv_transpose2d: conv2d's kernels, roles swapped ----------------------------------------

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, ConvTranspose2dFuncOptions options) {
  const std::string_view name = amp::op_name(amp::Op::ConvTranspose2d);
  auto [x0, w0, b0] = amp::prepare(amp::Op::ConvTranspose2d, x_in, w_in, b_in);
  HG_CHECK(x0.dim() == 4, name, ": input must be 4-D (N, C, H, W), got ", x0.shape());
  HG_CHECK(w0.dim() == 4, name, ": weight must be 4-D (in_channels, out_channels / groups, kh, kw), got ", w0.shape());
  const int64_t stride = options.stride, pad = options.padding, extra = options.output_padding,
                dilation = options.dilation, groups = options.groups;
  HG_CHECK(stride >= 1 && dilation >= 1 && pad >= 0 && extra >= 0, name,
           ": stride and dilation must be >= 1, padding and output_padding >= 0, got stride ", stride, ", dilation ",
           dilation, ", padding ", pad, ", output_padding ", extra);
  HG_CHECK(extra < stride || extra < dilation, name, ": output_padding (", extra,
           ") must be smaller than the stride (", stride, ") or the dilation (", dilation, ")");
  const int64_t N = x0.shape()[0], C = x0.shape()[1], H = x0.shape()[2], W = x0.shape()[3];
  HG_CHECK(groups >= 1 && C % groups == 0, name, ": groups (", groups, ") must be >= 1 and divide the input channels (",
           C, ")");
  HG_CHECK(w0.shape()[0] == C, name, ": input has ", C, " channels (shape ", x0.shape(),
           ") but the weight (shape ", w0.shape(), ") expects ", w0.shape()[0]);
  const int64_t O = w0.shape()[1] * groups, kh = w0.shape()[2], kw = w0.shape()[3];
  if (b0.defined()) HG_CHECK(b0.dim() == 1 && b0.shape()[0] == O, name, ": bias must have shape [", O, "], got ", b0.shape());
  const int64_t OH = (H - 1) * stride - 2 * pad + dilation * (kh - 1) + extra + 1;
  const int64_t OW = (W - 1) * stride - 2 * pad + dilation * (kw - 1) + extra + 1;
  HG_CHECK(OH >= 1 && OW >= 1, name, ": the output would be ", OH, "x", OW, " (the padding ", pad,
           " removes more than the input ", H, "x", W, " spans)");
  const auto [x, w, b] = same_device_and_dtype(name, x0, w0, b0);

  // The conv2d this op transposes: it maps an (N, O, OH, OW) image to x's shape with this weight.
  const kernels::ConvGeometry g{.N = N, .C = O, .H = OH, .W = OW, .O = C, .kh = kh, .kw = kw, .stride = stride,
                                .pad = pad, .OH = H, .OW = W, .dilation = dilation, .groups = groups};
  // 16-bit tensors run in f32 and round once: the kernel would round before the bias is added.
  const DType dtype = x.dtype();
  const bool widen = is_16bit_floating(dtype);
  const auto wide = [&](const Tensor& t) { return widen && t.defined() ? t.detach().to(f32) : t; };
  Tensor out = kernels::conv2d_input_grad(wide(w), wide(x), wide(b), g);
  if (widen) out = out.to(dtype);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  record(amp::Op::ConvTranspose2d, out, {x, w, b},
         [sx = SavedTensor(need_w ? x : Tensor()), sw = SavedTensor(need_x ? w : Tensor()), g, need_x, need_w, need_b,
          name](const Tensor& grad) -> std::vector<Tensor> {
           const Tensor gy = grad.contiguous();
           Tensor gx, gw, gb;
           if (need_x) gx = kernels::conv2d(gy, sw.get(), Tensor(), g, false);  // conv2d's forward
           if (need_w) gw = kernels::conv2d_backward(gy, Tensor(), sx.get(), Tensor(), g, false, true, false).w;
           if (need_b) gb = kernels::reduce(kernels::ReduceKind::Sum, kernels::plan_reduction(gy, {0, 2, 3}, name), false);
           return {gx, gw, gb};
         });
  return out;
}

}  // namespace hg
