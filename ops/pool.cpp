// max_pool2d and avg_pool2d (no padding). One task per (n, c) plane. max_pool2d remembers, per
// output, where in the plane its maximum came from (an i32 index tensor: 4 bytes per output
// instead of the input) and its backward adds the gradient there; avg_pool2d spreads each
// gradient evenly over its window.
#include "ops/pool.h"

#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "ops/cuda_ops.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace detail {
struct PoolGeometry {
  int64_t planes, H, W, OH, OW, kernel, stride;
};
}  // namespace detail

namespace {

using detail::PoolGeometry;

PoolGeometry check_pool(const char* op, const Tensor& x, int kernel, int stride) {
  HG_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", x.shape());
  HG_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype());
  HG_CHECK(kernel >= 1 && stride >= 1, op, ": kernel and stride must be >= 1, got ", kernel, " and ", stride);
  const int64_t H = x.shape()[2], W = x.shape()[3];
  HG_CHECK(H >= kernel && W >= kernel, op, ": input ", H, "x", W, " is smaller than the ", kernel, "x", kernel, " window");
  return {x.shape()[0] * x.shape()[1], H, W, (H - kernel) / stride + 1, (W - kernel) / stride + 1, kernel, stride};
}

// ---- kernels --------------------------------------------------------------------------------------

template <class T>
void max_pool_forward(const T* x, T* y, int32_t* where, const PoolGeometry& g) {
  parallel_for(0, g.planes, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const T* plane = x + p * g.H * g.W;
          int64_t best = (oh * g.stride) * g.W + ow * g.stride;
          Acc<T> best_value = Acc<T>(plane[best]);
          for (int64_t i = 0; i < g.kernel && !std::isnan(best_value); ++i)
            for (int64_t j = 0; j < g.kernel; ++j) {
              const int64_t at = (oh * g.stride + i) * g.W + ow * g.stride + j;
              const Acc<T> v = Acc<T>(plane[at]);
              if (v > best_value || std::isnan(v)) {  // NaN wins: max must not drop it
                best_value = v;
                best = at;
                if (std::isnan(v)) break;
              }
            }
          const int64_t out = (p * g.OH + oh) * g.OW + ow;
          y[out] = plane[best];
          where[out] = int32_t(best);
        }
  });
}

template <class T>
void max_pool_backward(const T* grad, const int32_t* where, T* dx, const PoolGeometry& g) {
  parallel_for(0, g.planes, 4, [&](int64_t lo, int64_t hi) {
    std::vector<Acc<T>> plane(static_cast<size_t>(g.H * g.W));
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(plane.begin(), plane.end(), Acc<T>(0));
      for (int64_t k = 0; k < g.OH * g.OW; ++k) plane[size_t(where[p * g.OH * g.OW + k])] += Acc<T>(grad[p * g.OH * g.OW + k]);
      for (int64_t k = 0; k < g.H * g.W; ++k) dx[p * g.H * g.W + k] = T(plane[size_t(k)]);
    }
  });
}

template <class T>
void avg_pool_forward(const T* x, T* y, const PoolGeometry& g) {
  const Acc<T> inv = Acc<T>(1) / Acc<T>(g.kernel * g.kernel);
  parallel_for(0, g.planes, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          Acc<T> total = 0;
          for (int64_t i = 0; i < g.kernel; ++i)
            for (int64_t j = 0; j < g.kernel; ++j)
              total += Acc<T>(x[p * g.H * g.W + (oh * g.stride + i) * g.W + ow * g.stride + j]);
          y[(p * g.OH + oh) * g.OW + ow] = T(total * inv);
        }
  });
}

template <class T>
void avg_pool_backward(const T* grad, T* dx, const PoolGeometry& g) {
  const Acc<T> inv = Acc<T>(1) / Acc<T>(g.kernel * g.kernel);
  parallel_for(0, g.planes, 4, [&](int64_t lo, int64_t hi) {
    std::vector<Acc<T>> plane(static_cast<size_t>(g.H * g.W));
    for (int64_t p = lo; p < hi; ++p) {
      std::fill(plane.begin(), plane.end(), Acc<T>(0));
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const Acc<T> share = Acc<T>(grad[(p * g.OH + oh) * g.OW + ow]) * inv;
          for (int64_t i = 0; i < g.kernel; ++i)
            for (int64_t j = 0; j < g.kernel; ++j) plane[size_t((oh * g.stride + i) * g.W + ow * g.stride + j)] += share;
        }
      for (int64_t k = 0; k < g.H * g.W; ++k) dx[p * g.H * g.W + k] = T(plane[size_t(k)]);
    }
  });
}

}  // namespace

// ---- the ops --------------------------------------------------------------------------------------

Tensor max_pool2d(const Tensor& input, int kernel, int stride) {
  auto [x0] = amp::prepare("max_pool2d", input);
  const PoolGeometry g = check_pool("max_pool2d", x0, kernel, stride);
  const Tensor x = x0.contiguous();
  Tensor out = empty({x.shape()[0], x.shape()[1], g.OH, g.OW}, x.options());
  Tensor where = empty(out.shape(), {.dtype = i32, .device = x.device()});
  if (out.numel() > 0) {
    if (x.device().is_cuda()) {
      cuda_ops::max_pool2d_forward(x, out, where, kernel, stride);
    } else {
      visit_floating(x.dtype(), "max_pool2d", [&]<class T> {
        max_pool_forward<T>(x.data_ptr<T>(), out.data_ptr<T>(), where.data_ptr<int32_t>(), g);
      });
    }
  }
  record("max_pool2d", out, {x}, [sw = SavedTensor(where, "max_pool2d"), shape = x.shape(), g](const Tensor& grad_in)
         -> std::vector<Tensor> {
    const Tensor grad = grad_in.contiguous(), where = sw.get();
    Tensor dx = empty(shape, grad.options());
    if (dx.device().is_cuda()) {
      cuda_ops::max_pool2d_backward(grad, where, dx);
    } else {
      visit_floating(grad.dtype(), "max_pool2d", [&]<class T> {
        max_pool_backward<T>(grad.data_ptr<T>(), where.data_ptr<int32_t>(), dx.data_ptr<T>(), g);
      });
    }
    return {dx};
  });
  return out;
}

Tensor avg_pool2d(const Tensor& input, int kernel, int stride) {
  auto [x0] = amp::prepare("avg_pool2d", input);
  const PoolGeometry g = check_pool("avg_pool2d", x0, kernel, stride);
  const Tensor x = x0.contiguous();
  Tensor out = empty({x.shape()[0], x.shape()[1], g.OH, g.OW}, x.options());
  if (out.numel() > 0) {
    if (x.device().is_cuda()) {
      cuda_ops::avg_pool2d_forward(x, out, kernel, stride);
    } else {
      visit_floating(x.dtype(), "avg_pool2d", [&]<class T> { avg_pool_forward<T>(x.data_ptr<T>(), out.data_ptr<T>(), g); });
    }
  }
  record("avg_pool2d", out, {x}, [shape = x.shape(), g, kernel, stride](const Tensor& grad_in) -> std::vector<Tensor> {
    const Tensor grad = grad_in.contiguous();
    Tensor dx = empty(shape, grad.options());
    if (dx.device().is_cuda()) {
      cuda_ops::avg_pool2d_backward(grad, dx, kernel, stride);
    } else {
      visit_floating(grad.dtype(), "avg_pool2d", [&]<class T> { avg_pool_backward<T>(grad.data_ptr<T>(), dx.data_ptr<T>(), g); });
    }
    return {dx};
  });
  return out;
}

}  // namespace hg
