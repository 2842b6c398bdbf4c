// conv2d on the CPU: im2col + GEMM, one image per task. im2col lays the receptive field of
// every output pixel out as a column, so the convolution of one image is a single GEMM:
//
//   out_n (O, OH*OW) = W (O, C*kh*kw) @ cols_n (C*kh*kw, OH*OW)   (+ bias per row)
//
// Backward: dcols = W^T @ g_n, scattered back to the image (col2im); dW = sum_n g_n @ cols_n^T,
// recomputing cols_n instead of saving it (memory); db = sum of g over n, h, w.
// 16-bit tensors are widened to f32 while they are laid out, so the GEMM always runs in f32.
#include "ops/conv.h"

#include <vector>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace detail {

struct ConvGeometry {
  int64_t N, C, H, W, O, kh, kw, stride, pad, OH, OW;
  int64_t ckk() const { return C * kh * kw; }
  int64_t ohw() const { return OH * OW; }
};

}  // namespace detail

namespace {

using detail::ConvGeometry;

// Images per partial sum of dW: fixed, so the result does not depend on the thread count.
constexpr int64_t kWeightGradGroup = 4;

// ---- layout kernels -----------------------------------------------------------------------------

template <class T, class S>
void im2col(const T* x, const ConvGeometry& g, S* cols) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        S* row = cols + ((c * g.kh + i) * g.kw + j) * g.ohw();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          S* dst = row + oh * g.OW;
          const int64_t ih = oh * g.stride - g.pad + i;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.OW, S(0));
            continue;
          }
          const T* src = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = ow * g.stride - g.pad + j;
            dst[ow] = (iw >= 0 && iw < g.W) ? S(Acc<T>(src[iw])) : S(0);
          }
        }
      }
}

template <class S>
void col2im_add(const S* cols, const ConvGeometry& g, S* image) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const S* row = cols + ((c * g.kh + i) * g.kw + j) * g.ohw();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.stride - g.pad + i;
          if (ih < 0 || ih >= g.H) continue;
          S* dst = image + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = ow * g.stride - g.pad + j;
            if (iw >= 0 && iw < g.W) dst[iw] += row[oh * g.OW + ow];
          }
        }
      }
}

// `n` values of T as compute-type S: the data itself when T is S, else widened into `panel`.
template <class T>
const Acc<T>* as_acc(const T* data, int64_t n, std::vector<Acc<T>>& panel) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return data;
  } else {
    panel.resize(size_t(n));
    convert_to_float(data, panel.data(), size_t(n));
    return panel.data();
  }
}

template <class T>
void store(const Acc<T>* values, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, Acc<T>>) std::copy(values, values + n, out);
  else convert_from_float(values, out, size_t(n));
}

detail::MatrixView dense(const void* data, int64_t rows, int64_t cols) { return {data, rows, cols, cols, 1}; }
detail::MatrixView dense_transposed(const void* data, int64_t rows, int64_t cols) {  // of a (cols, rows) matrix
  return {data, rows, cols, 1, rows};
}

// ---- forward ------------------------------------------------------------------------------------

template <class T>
void conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g) {
  using S = Acc<T>;
  std::vector<S> w_panel;
  const S* weight = as_acc(w.data_ptr<T>(), g.O * g.ckk(), w_panel);
  std::vector<S> bias(size_t(g.O), S(0));
  if (b.defined()) {
    const std::vector<double> values = b.to_vector<double>();
    std::copy(values.begin(), values.end(), bias.begin());
  }
  const T* input = x.data_ptr<T>();
  T* output = out.data_ptr<T>();
  parallel_for(0, g.N, 1, [&](int64_t lo, int64_t hi) {
    std::vector<S> cols(size_t(g.ckk() * g.ohw())), result(static_cast<size_t>(g.O * g.ohw()));
    for (int64_t n = lo; n < hi; ++n) {
      im2col(input + n * g.C * g.H * g.W, g, cols.data());
      for (int64_t o = 0; o < g.O; ++o) std::fill_n(result.data() + o * g.ohw(), g.ohw(), bias[size_t(o)]);
      detail::gemm_dense<S>(dense(weight, g.O, g.ckk()), dense(cols.data(), g.ckk(), g.ohw()), result.data(), true);
      store<T>(result.data(), g.O * g.ohw(), output + n * g.O * g.ohw());
    }
  });
}

// ---- backward -----------------------------------------------------------------------------------

template <class T>
void conv_backward(const Tensor& x, const Tensor& w, const Tensor& grad, const ConvGeometry& g, Tensor* gx, Tensor* gw,
                   Tensor* gb) {
  using S = Acc<T>;
  const T* input = x.data_ptr<T>();
  const T* dy = grad.data_ptr<T>();
  const int64_t image = g.C * g.H * g.W, plane = g.O * g.ohw();
  if (gx) {
    std::vector<S> w_panel;
    const S* weight = as_acc(w.data_ptr<T>(), g.O * g.ckk(), w_panel);
    T* dx = gx->data_ptr<T>();
    parallel_for(0, g.N, 1, [&](int64_t lo, int64_t hi) {
      std::vector<S> dcols(size_t(g.ckk() * g.ohw())), dimage(static_cast<size_t>(image)), g_panel;
      for (int64_t n = lo; n < hi; ++n) {
        const S* dy_n = as_acc(dy + n * plane, plane, g_panel);
        detail::gemm_dense<S>(dense_transposed(weight, g.ckk(), g.O), dense(dy_n, g.O, g.ohw()), dcols.data(), false);
        std::fill(dimage.begin(), dimage.end(), S(0));
        col2im_add(dcols.data(), g, dimage.data());
        store<T>(dimage.data(), image, dx + n * image);
      }
    });
  }
  if (gw) {
    const int64_t groups = (g.N + kWeightGradGroup - 1) / kWeightGradGroup, wsize = g.O * g.ckk();
    std::vector<std::vector<S>> partial(size_t(groups), std::vector<S>(size_t(wsize), S(0)));
    parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
      std::vector<S> cols(size_t(g.ckk() * g.ohw())), g_panel;
      for (int64_t group = lo; group < hi; ++group)
        for (int64_t n = group * kWeightGradGroup; n < std::min(g.N, (group + 1) * kWeightGradGroup); ++n) {
          im2col(input + n * image, g, cols.data());
          const S* dy_n = as_acc(dy + n * plane, plane, g_panel);
          detail::gemm_dense<S>(dense(dy_n, g.O, g.ohw()), dense_transposed(cols.data(), g.ohw(), g.ckk()),
                                partial[size_t(group)].data(), true);
        }
    });
    for (int64_t group = 1; group < groups; ++group)
      for (int64_t k = 0; k < wsize; ++k) partial[0][size_t(k)] += partial[size_t(group)][size_t(k)];
    if (groups == 0) partial.emplace_back(size_t(wsize), S(0));
    store<T>(partial[0].data(), wsize, gw->data_ptr<T>());
  }
  if (gb) {
    std::vector<S> bias_grad(static_cast<size_t>(g.O));
    for (int64_t o = 0; o < g.O; ++o) {
      double total = 0;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t k = 0; k < g.ohw(); ++k) total += double(Acc<T>(dy[n * plane + o * g.ohw() + k]));
      bias_grad[size_t(o)] = S(total);
    }
    store<T>(bias_grad.data(), g.O, gb->data_ptr<T>());
  }
}

ConvGeometry check_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& options) {
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

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv2dOptions options) {
  auto [x0, w0, b0] = amp::prepare("conv2d", x_in, w_in, b_in);
  detail::check_same_device("conv2d", x0, w0);
  if (b0.defined()) detail::check_same_device("conv2d", x0, b0);
  const ConvGeometry g = check_conv(x0, w0, b0, options);
  DType dtype = promote_types(x0.dtype(), w0.dtype());
  if (b0.defined()) dtype = promote_types(dtype, b0.dtype());
  HG_CHECK(is_floating(dtype), "conv2d: expected floating tensors, got ", x0.dtype(), " and ", w0.dtype());
  const Tensor x = x0.to(dtype).contiguous(), w = w0.to(dtype).contiguous();
  const Tensor b = b0.defined() ? b0.to(dtype) : Tensor();

  Tensor out = empty({g.N, g.O, g.OH, g.OW}, x.options());
  if (out.numel() > 0) {
    if (out.device().is_cuda()) {
      cuda_ops::conv2d_forward(x, w, b, out, options.stride, options.padding);
    } else {
      visit_floating(dtype, "conv2d", [&]<class T> { conv_forward<T>(x, w, b, out, g); });
    }
  }
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  record("conv2d", out, {x, w, b},
         [sx = SavedTensor(x, "conv2d"), sw = SavedTensor(need_x ? w : Tensor(), "conv2d"), g, need_x, need_w, need_b,
          options](const Tensor& grad) -> std::vector<Tensor> {
           const Tensor x = sx.get(), gy = grad.contiguous();
           Tensor gx = need_x ? empty(x.shape(), x.options()) : Tensor();
           Tensor gw = need_w ? empty({g.O, g.C, g.kh, g.kw}, x.options()) : Tensor();
           Tensor gb = need_b ? empty({g.O}, x.options()) : Tensor();
           if (x.device().is_cuda()) {
             cuda_ops::conv2d_backward(x, sw.get(), gy, options.stride, options.padding, gx, gw, gb);
           } else {
             visit_floating(x.dtype(), "conv2d", [&]<class T> {
               conv_backward<T>(x, need_x ? sw.get() : Tensor(), gy, g, need_x ? &gx : nullptr, need_w ? &gw : nullptr,
                                need_b ? &gb : nullptr);
             });
           }
           return {gx, gw, gb};
         });
  return out;
}

}  // namespace hg
