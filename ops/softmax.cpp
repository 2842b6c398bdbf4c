// softmax and log_softmax. The kernel views x as contiguous (outer, D, inner) with the softmax
// dimension in the middle; each (outer, inner) line runs the formulas of kernels/math/softmax.h
// (shared with the CUDA kernels). The backwards are one kernel each (not a chain of ops) so
// 16-bit tensors are rounded once, not four times.
#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"
#include "kernels/math/softmax.h"
#include "ops/reduce.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace {

// The CPU drivers: one (outer, inner) line per iteration, lines split over threads.
template <class T>
void softmax_kernel(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  using A = Acc<T>;
  const math::Softmax f{log};
  parallel_for(0, outer * inner, grain_for(2 * D), [&](int64_t lo, int64_t hi) {
    for (int64_t line = lo; line < hi; ++line) {
      const int64_t base = (line / inner) * D * inner + line % inner;
      A max = -std::numeric_limits<A>::infinity();
      for (int64_t d = 0; d < D; ++d) max = math::nan_max(max, A(x[base + d * inner]));
      A total = 0;
      for (int64_t d = 0; d < D; ++d) total += f.exp_term(A(x[base + d * inner]), max);
      const A log_total = f.log_of(total);
      for (int64_t d = 0; d < D; ++d) y[base + d * inner] = T(f.output(A(x[base + d * inner]), max, total, log_total));
    }
  });
}

template <class T>
void softmax_backward_kernel(const T* y, const T* g, T* dx, int64_t outer, int64_t D, int64_t inner, bool log) {
  using A = Acc<T>;
  const math::Softmax f{log};
  parallel_for(0, outer * inner, grain_for(2 * D), [&](int64_t lo, int64_t hi) {
    for (int64_t line = lo; line < hi; ++line) {
      const int64_t base = (line / inner) * D * inner + line % inner;
      A total = 0;
      for (int64_t d = 0; d < D; ++d) total += f.grad_term(A(g[base + d * inner]), A(y[base + d * inner]));
      for (int64_t d = 0; d < D; ++d) {
        const int64_t k = base + d * inner;
        dx[k] = T(f.grad(A(g[k]), A(y[k]), total));
      }
    }
  });
}

struct Lines {
  int64_t outer = 1, D = 1, inner = 1;
};

Lines lines_of(const Shape& shape, int d) {
  Lines l;
  if (shape.empty()) return l;
  l.D = shape[d];
  for (int k = 0; k < d; ++k) l.outer *= shape[k];
  for (int k = d + 1; k < shape.ndim(); ++k) l.inner *= shape[k];
  return l;
}

Tensor softmax_backward(const char* name, const Tensor& y, const Tensor& grad, int dim, bool log) {
  const Tensor g = grad.contiguous();
  const Lines l = lines_of(y.shape(), normalize_dim(dim, y.dim(), name));
  Tensor dx = empty(y.shape(), y.options());
  if (dx.numel() == 0) return dx;
  if (y.device().is_cuda()) {
    cuda_ops::softmax_backward(y, g, dx, l.outer, l.D, l.inner, log);
  } else {
    visit_floating(y.dtype(), name, [&]<class T> {
      softmax_backward_kernel<T>(y.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), l.outer, l.D, l.inner, log);
    });
  }
  return dx;
}

Tensor run_softmax(const char* name, const Tensor& x0, int dim, bool log) {
  HG_CHECK(is_floating(x0.dtype()), name, ": expected a floating tensor, got ", x0.dtype());
  const int d = normalize_dim(dim, x0.dim(), name);
  const Tensor x = x0.contiguous();
  Tensor out = empty(x.shape(), x.options());
  if (out.numel() == 0) return out;
  const Lines l = lines_of(x.shape(), d);
  if (x.device().is_cuda()) {
    cuda_ops::softmax(x, out, l.outer, l.D, l.inner, log);
  } else {
    visit_floating(x.dtype(), name, [&]<class T> {
      softmax_kernel<T>(x.data_ptr<T>(), out.data_ptr<T>(), l.outer, l.D, l.inner, log);
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& input, int dim) {
  auto [x] = amp::prepare(amp::Op::Softmax, input);
  Tensor out = run_softmax("softmax", x, dim, false);
  record("softmax", out, {x}, [sy = SavedTensor(out, "softmax"), dim](const Tensor& g) -> std::vector<Tensor> {
    return {softmax_backward("softmax", sy.get(), g, dim, false)};
  });
  return out;
}

Tensor log_softmax(const Tensor& input, int dim) {
  auto [x] = amp::prepare(amp::Op::LogSoftmax, input);
  Tensor out = run_softmax("log_softmax", x, dim, true);
  record("log_softmax", out, {x}, [sy = SavedTensor(out, "log_softmax"), dim](const Tensor& g) -> std::vector<Tensor> {
    return {softmax_backward("log_softmax", sy.get(), g, dim, true)};
  });
  return out;
}

}  // namespace hg
