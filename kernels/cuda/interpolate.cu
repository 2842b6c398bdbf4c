// CUDA interpolate (nearest and bilinear), the device side of kernels/interpolate.h on contiguous
// NCHW tensors, by the index math of kernels/math/interpolate.h. The forward gives each output
// its own thread; the backward gives each input element its own thread, which gathers from the
// outputs that read it in the CPU's order: no atomics, deterministic.
#include "core/cuda/device_math.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/interpolate.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

template <class T>
__global__ void interpolate_forward_kernel(const T* x, T* y, int64_t planes, math::Resize r) {
  using A = acc_t<T>;
  const int64_t H = r.rows.in, W = r.cols.in, OH = r.rows.out, OW = r.cols.out, n = planes * OH * OW;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, p = o / (OW * OH);
    const math::Taps<A> th = math::source_taps<A>(r.rows, oh, r.bilinear);
    const math::Taps<A> tw = math::source_taps<A>(r.cols, ow, r.bilinear);
    const T* row0 = x + (p * H + th.i0) * W;
    const T* row1 = x + (p * H + th.i1) * W;
    if (!r.bilinear) {
      y[o] = row0[tw.i0];
      continue;
    }
    const A top = tw.w0 * to_acc(row0[tw.i0]) + tw.w1 * to_acc(row0[tw.i1]);
    const A bottom = tw.w0 * to_acc(row1[tw.i0]) + tw.w1 * to_acc(row1[tw.i1]);
    y[o] = from_acc<T>(th.w0 * top + th.w1 * bottom);
  }
}

template <class T>
__global__ void interpolate_backward_kernel(const T* grad, T* dx, int64_t planes, math::Resize r) {
  using A = acc_t<T>;
  const int64_t H = r.rows.in, W = r.cols.in, OW = r.cols.out, OH = r.rows.out, n = planes * H * W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, p = e / (W * H);
    const math::OutputRange rr = math::outputs_reading<A>(r.rows, r.bilinear, h);
    const math::OutputRange cr = math::outputs_reading<A>(r.cols, r.bilinear, w);
    const T* g = grad + p * OH * OW;
    A total = 0;
    for (int64_t oh = rr.first; oh < rr.last; ++oh) {
      const A wh = math::tap_weight(math::source_taps<A>(r.rows, oh, r.bilinear), h);
      if (wh == A(0)) continue;
      A across = 0;
      for (int64_t ow = cr.first; ow < cr.last; ++ow)
        across += math::tap_weight(math::source_taps<A>(r.cols, ow, r.bilinear), w) * to_acc(g[oh * OW + ow]);
      total += wh * across;
    }
    dx[e] = from_acc<T>(total);
  }
}

}  // namespace

void interpolate_forward(const Tensor& x, const Tensor& out, const math::Resize& r) {
  launch_per_element("interpolate", x, out.numel(), [&]<class T>(int blocks) {
    interpolate_forward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(x.data_ptr<T>(), out.data_ptr<T>(),
                                                                     x.shape()[0] * x.shape()[1], r);
  });
}

void interpolate_backward(const Tensor& grad, const Tensor& grad_x, const math::Resize& r) {
  launch_per_element("interpolate backward", grad, grad_x.numel(), [&]<class T>(int blocks) {
    interpolate_backward_kernel<T><<<blocks, kernels::cuda::kThreads>>>(grad.data_ptr<T>(), grad_x.data_ptr<T>(),
                                                                      grad_x.shape()[0] * grad_x.shape()[1], r);
  });
}

}  // namespace hg::kernels::cuda
