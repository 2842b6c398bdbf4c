#include "kernels/softmax.h"

#include <limits>

#include "core/parallel.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/softmax.h"

namespace hg::kernels {

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

}  // namespace

Tensor softmax(const Tensor& x, int dim, bool log) {
  Tensor out = empty(x.shape(), x.options());
  if (out.numel() == 0) return out;
  const Lines l = lines_of(x.shape(), dim);
  if (x.device().is_cuda()) {
    kernels::cuda::softmax(x, out, l.outer, l.D, l.inner, log);
  } else {
    visit_floating(x.dtype(), "softmax", [&]<class T> {
      softmax_kernel<T>(x.data_ptr<T>(), out.data_ptr<T>(), l.outer, l.D, l.inner, log);
    });
  }
  return out;
}

Tensor softmax_backward(const Tensor& y, const Tensor& g, int dim, bool log) {
  Tensor dx = empty(y.shape(), y.options());
  if (dx.numel() == 0) return dx;
  const Lines l = lines_of(y.shape(), dim);
  if (y.device().is_cuda()) {
    kernels::cuda::softmax_backward(y, g, dx, l.outer, l.D, l.inner, log);
  } else {
    visit_floating(y.dtype(), "softmax", [&]<class T> {
      softmax_backward_kernel<T>(y.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), l.outer, l.D, l.inner, log);
    });
  }
  return dx;
}

}  // namespace hg::kernels
