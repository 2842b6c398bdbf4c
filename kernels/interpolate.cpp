// interpolate on the CPU: one task per (n, c) plane. The forward reads each output's taps from
// per-axis tables; the backward gathers, for each input element, the outputs that read it (in
// the order the CUDA kernel uses), so no two tasks write one element.
#include "kernels/interpolate.h"

#include <vector>

#include "core/parallel.h"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels {

namespace {

using math::ResizeAxis;
using math::Taps;

template <class A>
std::vector<Taps<A>> axis_taps(const ResizeAxis& a, bool bilinear) {
  std::vector<Taps<A>> taps(static_cast<size_t>(a.out));
  for (int64_t o = 0; o < a.out; ++o) taps[size_t(o)] = math::source_taps<A>(a, o, bilinear);
  return taps;
}

template <class T>
void forward(const T* x, T* y, int64_t planes, const math::Resize& r) {
  using A = Acc<T>;
  const std::vector<Taps<A>> rows = axis_taps<A>(r.rows, r.bilinear), cols = axis_taps<A>(r.cols, r.bilinear);
  const int64_t H = r.rows.in, W = r.cols.in, OH = r.rows.out, OW = r.cols.out;
  parallel_for(0, planes, grain_for(OH * OW), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const T* plane = x + p * H * W;
      T* out = y + p * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Taps<A>& th = rows[size_t(oh)];
        const T* row0 = plane + th.i0 * W;
        const T* row1 = plane + th.i1 * W;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Taps<A>& tw = cols[size_t(ow)];
          if (!r.bilinear) {
            out[oh * OW + ow] = row0[tw.i0];  // a copy: exact, and inf/NaN neighbours stay out
            continue;
          }
          // PyTorch's order: each row's two columns, then the two rows.
          const A top = tw.w0 * A(row0[tw.i0]) + tw.w1 * A(row0[tw.i1]);
          const A bottom = tw.w0 * A(row1[tw.i0]) + tw.w1 * A(row1[tw.i1]);
          out[oh * OW + ow] = T(th.w0 * top + th.w1 * bottom);
        }
      }
    }
  });
}

template <class T>
void backward(const T* grad, T* dx, int64_t planes, const math::Resize& r) {
  using A = Acc<T>;
  const std::vector<Taps<A>> rows = axis_taps<A>(r.rows, r.bilinear), cols = axis_taps<A>(r.cols, r.bilinear);
  const int64_t H = r.rows.in, W = r.cols.in, OH = r.rows.out, OW = r.cols.out;
  std::vector<math::OutputRange> row_range(static_cast<size_t>(H)), col_range(static_cast<size_t>(W));
  for (int64_t h = 0; h < H; ++h) row_range[size_t(h)] = math::outputs_reading<A>(r.rows, r.bilinear, h);
  for (int64_t w = 0; w < W; ++w) col_range[size_t(w)] = math::outputs_reading<A>(r.cols, r.bilinear, w);
  parallel_for(0, planes, grain_for(OH * OW), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const T* g = grad + p * OH * OW;
      for (int64_t h = 0; h < H; ++h) {
        const math::OutputRange rr = row_range[size_t(h)];
        for (int64_t w = 0; w < W; ++w) {
          const math::OutputRange cr = col_range[size_t(w)];
          A total = 0;
          for (int64_t oh = rr.first; oh < rr.last; ++oh) {
            const A wh = math::tap_weight(rows[size_t(oh)], h);
            if (wh == A(0)) continue;
            A across = 0;
            for (int64_t ow = cr.first; ow < cr.last; ++ow)
              across += math::tap_weight(cols[size_t(ow)], w) * A(g[oh * OW + ow]);
            total += wh * across;
          }
          dx[(p * H + h) * W + w] = T(total);
        }
      }
    }
  });
}

}  // namespace

Tensor interpolate(const Tensor& x, const math::Resize& r) {
  Tensor out = empty({x.shape()[0], x.shape()[1], r.rows.out, r.cols.out}, x.options());
  if (out.numel() == 0) return out;
  if (x.device().is_cuda()) {
    kernels::cuda::interpolate_forward(x, out, r);
  } else {
    visit_floating(x.dtype(), "interpolate", [&]<class T> {
      forward<T>(x.data_ptr<T>(), out.data_ptr<T>(), x.shape()[0] * x.shape()[1], r);
    });
  }
  return out;
}

Tensor interpolate_backward(const Tensor& grad, const Shape& x_shape, const math::Resize& r) {
  Tensor dx = empty(x_shape, grad.options());
  if (dx.numel() == 0) return dx;
  if (grad.device().is_cuda()) {
    kernels::cuda::interpolate_backward(grad, dx, r);
  } else {
    visit_floating(grad.dtype(), "interpolate", [&]<class T> {
      backward<T>(grad.data_ptr<T>(), dx.data_ptr<T>(), x_shape[0] * x_shape[1], r);
    });
  }
  return dx;
}

}  // namespace hg::kernels
