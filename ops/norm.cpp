// batch_norm and layer_norm: the CPU loops around the formulas of kernels/math/norm.h (shared with
// the CUDA kernels). Statistics are computed in double (two passes: the mean, then squared
// deviations) whatever the input dtype, and the output keeps the input dtype, so f16
// activations stay f16 under autocast.
#include "ops/norm.h"

#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"
#include "kernels/math/norm.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace {

std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(static_cast<size_t>(n), fallback);
}

// Per-channel results in `dtype`, converted straight from the double statistics.
Tensor vector_tensor(const std::vector<double>& v, DType dtype, Device device) {
  return from_vector(v, {int64_t(v.size())}, {.dtype = dtype, .device = device});
}

// ---- batch_norm: groups are channels of x viewed as (N, C, S) -------------------------------------

struct ChannelLayout {
  int64_t N, C, S;
  int64_t count() const { return N * S; }
};

template <class T>
void channel_stats(const T* x, const ChannelLayout& l, std::vector<double>& mean, std::vector<double>& var) {
  parallel_for(0, l.C, grain_for(2 * l.count()), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double total = 0, squares = 0;
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) total += double(Acc<T>(x[(n * l.C + c) * l.S + s]));
      const double m = total / double(l.count());
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) {
          const double d = double(Acc<T>(x[(n * l.C + c) * l.S + s])) - m;
          squares += d * d;
        }
      mean[size_t(c)] = m;
      var[size_t(c)] = squares / double(l.count());
    }
  });
}

// y = x * scale[c] + shift[c], with scale = w * rstd and shift = b - mean * scale.
template <class T>
void channel_affine(const T* x, T* y, const ChannelLayout& l, const std::vector<double>& scale,
                    const std::vector<double>& shift) {
  parallel_for(0, l.N * l.C, grain_for(l.S), [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t c = nc % l.C;
      const Acc<T> a = Acc<T>(scale[size_t(c)]), b = Acc<T>(shift[size_t(c)]);
      for (int64_t s = 0; s < l.S; ++s) y[nc * l.S + s] = T(Acc<T>(x[nc * l.S + s]) * a + b);
    }
  });
}

template <class T>
void batch_norm_backward_kernel(const T* x, const T* g, const ChannelLayout& l, const std::vector<double>& mean,
                                const std::vector<double>& rstd, const std::vector<double>& w, bool training, T* dx,
                                std::vector<double>& dw, std::vector<double>& db) {
  parallel_for(0, l.C, grain_for(3 * l.count()), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const double m = mean[size_t(c)], r = rstd[size_t(c)];
      double sum_g = 0, sum_g_xhat = 0;
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) {
          const int64_t k = (n * l.C + c) * l.S + s;
          const double gv = double(Acc<T>(g[k]));
          sum_g += gv;
          sum_g_xhat += gv * (double(Acc<T>(x[k])) - m) * r;
        }
      dw[size_t(c)] = sum_g_xhat;
      db[size_t(c)] = sum_g;
      if (dx == nullptr) continue;
      const double M = double(l.count()), wc = w[size_t(c)];
      for (int64_t n = 0; n < l.N; ++n)
        for (int64_t s = 0; s < l.S; ++s) {
          const int64_t k = (n * l.C + c) * l.S + s;
          const double gv = double(Acc<T>(g[k]));
          const double xhat = (double(Acc<T>(x[k])) - m) * r;
          const double value = training ? math::Normalization::input_grad(wc, r, M, gv, xhat, sum_g, sum_g_xhat)
                                        : gv * wc * r;
          dx[k] = T(Acc<T>(value));
        }
    }
  });
}

}  // namespace

namespace {
// The GPU path: the statistics stay on the device (f32 tensors), so training never waits for it.
Tensor batch_norm_cuda(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps) {
  Tensor mean, rstd;
  Tensor out = cuda_ops::batch_norm_forward(x, running_mean, running_var, weight, bias, training, momentum, eps, mean, rstd);
  if (training)  // the kernel wrote the running statistics in place
    for (const Tensor* t : {&running_mean, &running_var})
      if (t->defined()) t->impl()->storage->bump_version();
  record("batch_norm", out, {x, weight, bias},
         [sx = SavedTensor(x, "batch_norm"), sw = SavedTensor(weight, "batch_norm"), mean, rstd, training,
          has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           Tensor dx, dw, db;
           cuda_ops::batch_norm_backward(sx.get(), grad.contiguous(), sw.get(), mean, rstd, training, dx, dw, db);
           return {dx, sw.defined() ? dw : Tensor(), has_b ? db : Tensor()};
         });
  return out;
}
}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  auto [x0, weight, bias] = amp::prepare(amp::Op::BatchNorm, x_in, weight_in, bias_in);
  HG_CHECK(x0.dim() >= 2, "batch_norm: input must be (N, C, ...), got ", x0.shape());
  HG_CHECK(is_floating(x0.dtype()), "batch_norm: expected a floating input, got ", x0.dtype());
  const int64_t C = x0.shape()[1];
  for (const Tensor* t : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (t->defined()) {
      HG_CHECK(t->dim() == 1 && t->shape()[0] == C, "batch_norm: expected per-channel tensors of shape [", C, "], got ",
               t->shape());
      detail::check_same_device("batch_norm", x0, *t);
    }
  HG_CHECK(training || (running_mean.defined() && running_var.defined()),
           "batch_norm: evaluation mode needs running_mean and running_var");
  const Tensor x = x0.contiguous();
  int64_t spatial = 1;
  for (int d = 2; d < x.dim(); ++d) spatial *= x.shape()[d];
  const ChannelLayout l{x.shape()[0], C, spatial};
  if (C == 0) return empty(x.shape(), x.options());  // no channels: nothing to normalise
  HG_CHECK(!training || l.count() > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
           x.shape());
  if (x.device().is_cuda()) return batch_norm_cuda(x, running_mean, running_var, weight, bias, training, momentum, eps);

  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
  if (training) {
    visit_floating(x.dtype(), "batch_norm", [&]<class T> { channel_stats<T>(x.data_ptr<T>(), l, mean, var); });
    NoGradGuard no_grad;  // running statistics are buffers, updated in place
    const double unbiased = double(l.count()) / double(l.count() - 1);
    if (running_mean.defined()) {
      std::vector<double> rm = running_mean.to_vector<double>();
      for (int64_t c = 0; c < C; ++c) rm[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * mean[size_t(c)];
      Tensor(running_mean).copy_(vector_tensor(rm, running_mean.dtype(), x.device()));
    }
    if (running_var.defined()) {
      std::vector<double> rv = running_var.to_vector<double>();
      for (int64_t c = 0; c < C; ++c) rv[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * var[size_t(c)] * unbiased;
      Tensor(running_var).copy_(vector_tensor(rv, running_var.dtype(), x.device()));
    }
  } else {
    mean = running_mean.to_vector<double>();
    var = running_var.to_vector<double>();
  }
  const std::vector<double> w = values_or(weight, C, 1.0), b = values_or(bias, C, 0.0);
  std::vector<double> rstd(static_cast<size_t>(C)), scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    rstd[size_t(c)] = math::Normalization::rstd(var[size_t(c)], eps);
    scale[size_t(c)] = w[size_t(c)] * rstd[size_t(c)];
    shift[size_t(c)] = b[size_t(c)] - mean[size_t(c)] * scale[size_t(c)];
  }
  Tensor out = empty(x.shape(), x.options());
  visit_floating(x.dtype(), "batch_norm", [&]<class T> { channel_affine<T>(x.data_ptr<T>(), out.data_ptr<T>(), l, scale, shift); });

  record("batch_norm", out, {x, weight, bias},
         [sx = SavedTensor(x, "batch_norm"), l, mean, rstd, w, training, w_options = weight.defined() ? weight.options() : TensorOptions{},
          has_w = weight.defined(), has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           const Tensor x = sx.get(), g = grad.contiguous();
           Tensor dx = empty(x.shape(), x.options());
           std::vector<double> dw(static_cast<size_t>(l.C)), db(static_cast<size_t>(l.C));
           visit_floating(x.dtype(), "batch_norm", [&]<class T> {
             batch_norm_backward_kernel<T>(x.data_ptr<T>(), g.data_ptr<T>(), l, mean, rstd, w, training, dx.data_ptr<T>(), dw, db);
           });
           const auto as_param = [&](const std::vector<double>& v) { return vector_tensor(v, w_options.dtype, x.device()); };
           return {dx, has_w ? as_param(dw) : Tensor(), has_b ? as_param(db) : Tensor()};
         });
  return out;
}

// ---- layer_norm: groups are the rows of x viewed as (rows, D) ------------------------------------------

namespace {

template <class T>
void layer_norm_forward_kernel(const T* x, T* y, int64_t rows, int64_t D, double eps, const std::vector<double>& w,
                               const std::vector<double>& b, std::vector<double>& mean, std::vector<double>& rstd) {
  parallel_for(0, rows, grain_for(8 * D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* row = x + r * D;
      double total = 0, squares = 0;
      for (int64_t j = 0; j < D; ++j) total += double(Acc<T>(row[j]));
      const double m = total / double(D);
      for (int64_t j = 0; j < D; ++j) squares += (double(Acc<T>(row[j])) - m) * (double(Acc<T>(row[j])) - m);
      const double rs = math::Normalization::rstd(squares / double(D), eps);
      mean[size_t(r)] = m;
      rstd[size_t(r)] = rs;
      for (int64_t j = 0; j < D; ++j)
        y[r * D + j] = T(Acc<T>((double(Acc<T>(row[j])) - m) * rs * w[size_t(j)] + b[size_t(j)]));
    }
  });
}

constexpr int64_t kRowsPerPartial = 64;  // fixed: dw/db partial sums do not depend on thread count

template <class T>
void layer_norm_backward_kernel(const T* x, const T* g, int64_t rows, int64_t D, const std::vector<double>& w,
                                const std::vector<double>& mean, const std::vector<double>& rstd, T* dx,
                                std::vector<double>& dw, std::vector<double>& db) {
  const int64_t parts = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
  std::vector<std::vector<double>> pw(static_cast<size_t>(parts), std::vector<double>(static_cast<size_t>(D)));
  std::vector<std::vector<double>> pb = pw;
  parallel_chunks(rows, kRowsPerPartial, [&](int64_t part, int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const double m = mean[size_t(r)], rs = rstd[size_t(r)];
      double sum_gh = 0, sum_gh_xhat = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double gv = double(Acc<T>(g[r * D + j])), xhat = (double(Acc<T>(x[r * D + j])) - m) * rs;
        sum_gh += gv * w[size_t(j)];
        sum_gh_xhat += gv * w[size_t(j)] * xhat;
        pw[size_t(part)][size_t(j)] += gv * xhat;
        pb[size_t(part)][size_t(j)] += gv;
      }
      for (int64_t j = 0; j < D; ++j) {
        const double gv = double(Acc<T>(g[r * D + j])), xhat = (double(Acc<T>(x[r * D + j])) - m) * rs;
        dx[r * D + j] = T(Acc<T>(math::Normalization::input_grad(1.0, rs, double(D), gv * w[size_t(j)], xhat, sum_gh, sum_gh_xhat)));
      }
    }
  });
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t j = 0; j < D; ++j) dw[size_t(j)] += pw[size_t(part)][size_t(j)], db[size_t(j)] += pb[size_t(part)][size_t(j)];
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, Shape normalized_shape, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  auto [x0, weight, bias] = amp::prepare(amp::Op::LayerNorm, x_in, weight_in, bias_in);
  const int k = normalized_shape.ndim();
  HG_CHECK(k >= 1 && x0.dim() >= k && Shape(x0.shape().end() - k, x0.shape().end()) == normalized_shape,
           "layer_norm: normalized_shape ", normalized_shape, " must match the trailing dimensions of the input ",
           x0.shape());
  HG_CHECK(is_floating(x0.dtype()), "layer_norm: expected a floating input, got ", x0.dtype());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    if (t->defined()) {
      HG_CHECK(t->shape() == normalized_shape, "layer_norm: weight and bias must have shape ", normalized_shape,
               ", got ", t->shape());
      detail::check_same_device("layer_norm", x0, *t);
    }
  const Tensor x = x0.contiguous();
  const int64_t D = checked_numel(normalized_shape, "layer_norm"), rows = D == 0 ? 0 : x.numel() / D;
  if (x.device().is_cuda()) {
    Tensor mean, rstd;
    Tensor out = cuda_ops::layer_norm_forward(x, weight, bias, rows, D, eps, mean, rstd);
    record("layer_norm", out, {x, weight, bias},
           [sx = SavedTensor(x, "layer_norm"), sw = SavedTensor(weight, "layer_norm"), mean, rstd, rows, D,
            normalized_shape, has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
             Tensor dx, dw, db;
             cuda_ops::layer_norm_backward(sx.get(), grad.contiguous(), sw.get(), mean, rstd, rows, D, dx, dw, db);
             return {dx, sw.defined() ? dw.reshape(normalized_shape) : Tensor(),
                     has_b ? db.reshape(normalized_shape) : Tensor()};
           });
    return out;
  }
  const std::vector<double> w = values_or(weight.defined() ? weight.flatten() : Tensor(), D, 1.0);
  const std::vector<double> b = values_or(bias.defined() ? bias.flatten() : Tensor(), D, 0.0);
  std::vector<double> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  Tensor out = empty(x.shape(), x.options());
  visit_floating(x.dtype(), "layer_norm", [&]<class T> {
    layer_norm_forward_kernel<T>(x.data_ptr<T>(), out.data_ptr<T>(), rows, D, eps, w, b, mean, rstd);
  });
  record("layer_norm", out, {x, weight, bias},
         [sx = SavedTensor(x, "layer_norm"), rows, D, w, mean, rstd, normalized_shape,
          w_options = weight.defined() ? weight.options() : TensorOptions{}, has_w = weight.defined(),
          has_b = bias.defined()](const Tensor& grad) -> std::vector<Tensor> {
           const Tensor x = sx.get(), g = grad.contiguous();
           Tensor dx = empty(x.shape(), x.options());
           std::vector<double> dw(static_cast<size_t>(D)), db(static_cast<size_t>(D));
           visit_floating(x.dtype(), "layer_norm", [&]<class T> {
             layer_norm_backward_kernel<T>(x.data_ptr<T>(), g.data_ptr<T>(), rows, D, w, mean, rstd, dx.data_ptr<T>(), dw, db);
           });
           const auto as_param = [&](const std::vector<double>& v) {
             return vector_tensor(v, w_options.dtype, x.device()).reshape(normalized_shape);
           };
           return {dx, has_w ? as_param(dw) : Tensor(), has_b ? as_param(db) : Tensor()};
         });
  return out;
}

}  // namespace hg
