// CUDA batch_norm and layer_norm: drivers around the formulas of kernels/math/norm.h, which the CPU
// loops (ops/norm.cpp) run too. Each group's statistics are summed in double (two
// passes, like the CPU) in registers and combined by a block reduction in a fixed order, so they
// are deterministic. They stay on the device and the running statistics are updated there in
// place: no value comes back to the host, so a training step never waits for the GPU.
#include <optional>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/norm.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// mean/rstd are saved in the compute type: f32, or f64 for f64 inputs (an f64 model keeps f64
// accuracy, as on the CPU).
template <class T> using stat_t = acc_t<T>;

// ---- math -----------------------------------------------------------------------------------------

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. Every thread must call it; the order is fixed, so the result is deterministic.
__device__ double block_sum(double v) {
  __shared__ double partial[32];
  v = kernels::cuda::warp_sum(v);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x) / 32 ? partial[lane] : 0.0;
  return kernels::cuda::warp_sum(v);
}

// x viewed as (N, C, S): channel c holds N runs of S contiguous values.
struct ChannelLayout {
  int64_t N, C, S;
};

// Calls f(k) for the elements of channel c this thread owns: the channel's values number
// t, t + blockDim, t + 2 * blockDim, ... The (n, s) position advances with a carry instead of a
// 64-bit division per element.
template <class F>
__device__ __forceinline__ void for_each_in_channel(const ChannelLayout& l, int64_t c, F&& f) {
  if (l.S == 0) return;
  const int64_t step_n = blockDim.x / l.S, step_s = blockDim.x % l.S;
  int64_t n = threadIdx.x / l.S, s = threadIdx.x % l.S;
  while (n < l.N) {
    f((n * l.C + c) * l.S + s);
    n += step_n, s += step_s;
    if (s >= l.S) s -= l.S, ++n;
  }
}

template <class P>
__device__ __forceinline__ double value_or(const P* p, int64_t i, double fallback) {
  return p ? double(to_acc(p[i])) : fallback;
}

// Per-channel tensors of one dtype P; null where undefined.
template <class P>
struct ChannelParams {
  const P* weight;
  const P* bias;
  P* running_mean;
  P* running_var;
};

// ---- kernels: batch_norm --------------------------------------------------------------------------

// Threads of the one-block-per-channel kernels: a layer has few channels (often fewer than the
// GPU's SMs) but many values per channel, so each block is as wide as CUDA allows.
constexpr int kChannelThreads = 1024;

// One block per channel. Training: the batch statistics (biased variance for normalising, the
// unbiased one into running_var); evaluation: the running statistics. Either way thread 0 saves
// mean/rstd and folds w, b into y = x * scale + shift, kept in double: affine (2, C).
template <class T, class P>
__global__ void __launch_bounds__(kChannelThreads)
    batch_norm_stats_kernel(const T* x, ChannelLayout l, ChannelParams<P> p, bool training, double momentum, double eps,
                            stat_t<T>* mean, stat_t<T>* rstd, double* affine) {
  const int64_t c = blockIdx.x;
  const double count = double(l.N * l.S);
  double m, var;
  if (training) {
    double total = 0, squares = 0;
    for_each_in_channel(l, c, [&](int64_t k) { total += double(to_acc(x[k])); });
    m = block_sum(total) / count;
    for_each_in_channel(l, c, [&](int64_t k) {
      const double d = double(to_acc(x[k])) - m;
      squares += d * d;
    });
    var = block_sum(squares) / count;
  } else {
    m = double(to_acc(p.running_mean[c]));
    var = double(to_acc(p.running_var[c]));
  }
  if (threadIdx.x != 0) return;
  using math::Normalization;
  if (training && p.running_mean)
    p.running_mean[c] =
        from_acc<P>(acc_t<P>(Normalization::running_mean(double(to_acc(p.running_mean[c])), m, momentum)));
  if (training && p.running_var)
    p.running_var[c] =
        from_acc<P>(acc_t<P>(Normalization::running_var(double(to_acc(p.running_var[c])), var, count, momentum)));
  const double r = Normalization::rstd(var, eps);
  mean[c] = stat_t<T>(m);
  rstd[c] = stat_t<T>(r);
  const Normalization::Affine fold = Normalization::fold(m, r, value_or(p.weight, c, 1.0), value_or(p.bias, c, 0.0));
  affine[c] = fold.scale;
  affine[l.C + c] = fold.shift;
}

template <class T>
__global__ void batch_norm_affine_kernel(const T* x, T* y, int64_t n, ChannelLayout l, const double* affine) {
  using A = acc_t<T>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (e / l.S) % l.C;
    y[e] = from_acc<T>(to_acc(x[e]) * A(affine[c]) + A(affine[l.C + c]));
  }
}

// One block per channel: dw = sum(g * xhat), db = sum(g), in P; for the dx kernel, sums (3, C)
// keeps w, sum(g) and sum(g * xhat) in double.
template <class T, class P>
__global__ void __launch_bounds__(kChannelThreads)
    batch_norm_grad_sums_kernel(const T* x, const T* g, ChannelLayout l, const P* weight, const stat_t<T>* mean,
                                const stat_t<T>* rstd, P* dw, P* db, double* sums) {
  const int64_t c = blockIdx.x;
  const double m = double(mean[c]), r = double(rstd[c]);
  math::Normalization::GradientSums own;
  for_each_in_channel(l, c, [&](int64_t k) { own.add(double(to_acc(g[k])), (double(to_acc(x[k])) - m) * r); });
  const double sum_g = block_sum(own.g), sum_g_xhat = block_sum(own.g_xhat);
  if (threadIdx.x != 0) return;
  dw[c] = from_acc<P>(acc_t<P>(sum_g_xhat));
  db[c] = from_acc<P>(acc_t<P>(sum_g));
  sums[c] = value_or(weight, c, 1.0);
  sums[l.C + c] = sum_g;
  sums[2 * l.C + c] = sum_g_xhat;
}

template <class T>
__global__ void batch_norm_dx_kernel(const T* x, const T* g, int64_t n, ChannelLayout l, const stat_t<T>* mean,
                                     const stat_t<T>* rstd, const double* sums, bool training, T* dx) {
  const double M = double(l.N * l.S);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (e / l.S) % l.C;
    const double m = double(mean[c]), r = double(rstd[c]), wc = sums[c], sum_g = sums[l.C + c],
                 sum_g_xhat = sums[2 * l.C + c], gv = double(to_acc(g[e]));
    const double value =
        training ? math::Normalization::input_grad(wc, r, M, gv, (double(to_acc(x[e])) - m) * r, sum_g, sum_g_xhat)
                 : gv * wc * r;
    dx[e] = from_acc<T>(acc_t<T>(value));
  }
}

// ---- kernels: layer_norm --------------------------------------------------------------------------

// One block per row of x (rows, D); grid-stride over rows.
template <class T, class P>
__global__ void layer_norm_forward_kernel(const T* x, T* y, int64_t rows, int64_t D, double eps, const P* weight,
                                          const P* bias, stat_t<T>* mean, stat_t<T>* rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * D;
    double total = 0, squares = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) total += double(to_acc(xr[j]));
    const double m = block_sum(total) / double(D);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double d = double(to_acc(xr[j])) - m;
      squares += d * d;
    }
    const double rs = math::Normalization::rstd(block_sum(squares) / double(D), eps);
    if (threadIdx.x == 0) mean[r] = stat_t<T>(m), rstd[r] = stat_t<T>(rs);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
      y[r * D + j] = from_acc<T>(
          acc_t<T>((double(to_acc(xr[j])) - m) * rs * value_or(weight, j, 1.0) + value_or(bias, j, 0.0)));
  }
}

// dx, one block per row: the two row sums, then the formula at the top of the file.
template <class T, class P>
__global__ void layer_norm_dx_kernel(const T* x, const T* g, int64_t rows, int64_t D, const P* weight,
                                     const stat_t<T>* mean, const stat_t<T>* rstd, T* dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double m = double(mean[r]), rs = double(rstd[r]);
    double sum_gh = 0, sum_gh_xhat = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double gh = double(to_acc(g[r * D + j])) * value_or(weight, j, 1.0);
      const double xhat = (double(to_acc(x[r * D + j])) - m) * rs;
      sum_gh += gh;
      sum_gh_xhat += gh * xhat;
    }
    sum_gh = block_sum(sum_gh);
    sum_gh_xhat = block_sum(sum_gh_xhat);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double gv = double(to_acc(g[r * D + j])), xhat = (double(to_acc(x[r * D + j])) - m) * rs;
      dx[r * D + j] = from_acc<T>(
          acc_t<T>(math::Normalization::input_grad(1.0, rs, double(D), gv * value_or(weight, j, 1.0), xhat, sum_gh, sum_gh_xhat)));
    }
  }
}

constexpr int kColumnTile = 32;  // columns per block: one warp reads 32 adjacent values of a row
constexpr int kRowLanes = 16;    // threads striding over the rows of each column

// dw[j] = sum over rows of g * xhat, db[j] = sum of g: column sums, so a block owns 32 columns and
// its kRowLanes threads per column take every kRowLanes-th row, then add their partials in order
// (deterministic, no atomics).
template <class T, class P>
__global__ void layer_norm_weight_grad_kernel(const T* x, const T* g, int64_t rows, int64_t D, const stat_t<T>* mean,
                                              const stat_t<T>* rstd, P* dw, P* db) {
  __shared__ double partial_w[kRowLanes][kColumnTile], partial_b[kRowLanes][kColumnTile];
  const int64_t j = int64_t(blockIdx.x) * kColumnTile + threadIdx.x;
  double sum_w = 0, sum_b = 0;
  if (j < D)
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) {
      const double gv = double(to_acc(g[r * D + j]));
      const double xhat = (double(to_acc(x[r * D + j])) - double(mean[r])) * double(rstd[r]);
      sum_w += gv * xhat;
      sum_b += gv;
    }
  partial_w[threadIdx.y][threadIdx.x] = sum_w;
  partial_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y != 0 || j >= D) return;
  for (int lane = 1; lane < kRowLanes; ++lane) {
    sum_w += partial_w[lane][threadIdx.x];
    sum_b += partial_b[lane][threadIdx.x];
  }
  dw[j] = from_acc<P>(acc_t<P>(sum_w));
  db[j] = from_acc<P>(acc_t<P>(sum_b));
}

// ---- launchers ------------------------------------------------------------------------------------

// The one dtype of the per-channel (or per-column) tensors a kernel reads and writes; f32 when
// none is defined. Kernels are instantiated per (x dtype, parameter dtype), not per tensor.
DType parameter_dtype(const char* op, std::initializer_list<const Tensor*> params) {
  std::optional<DType> dtype;
  for (const Tensor* t : params) {
    if (!t->defined()) continue;
    HG_CHECK(t->is_contiguous(), op, ": expected contiguous weight, bias and running statistics");
    HG_CHECK(!dtype || *dtype == t->dtype(), op,
             " on CUDA: weight, bias and running statistics must share one dtype, got ", *dtype, " and ", t->dtype());
    dtype = t->dtype();
  }
  return dtype.value_or(f32);
}

template <class P>
P* pointer_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<P>() : nullptr;
}

ChannelLayout channel_layout(const Tensor& x) {
  const int64_t N = x.shape()[0], C = x.shape()[1];
  return {N, C, N * C == 0 ? 0 : x.numel() / (N * C)};
}

TensorOptions stat_options(const Tensor& x) { return {.dtype = accumulate_dtype(x.dtype()), .device = x.device()}; }

// Blocks for a one-block-per-row kernel (they stride over the rows beyond).
int row_blocks(int64_t rows) { return int(std::min<int64_t>(rows, 65535 * 8)); }

}  // namespace

Tensor batch_norm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                          const Tensor& bias, bool training, double momentum, double eps, Tensor& mean, Tensor& rstd) {
  detail::check_cuda_device(x.device(), "batch_norm");
  const ChannelLayout l = channel_layout(x);
  const DType param = parameter_dtype("batch_norm", {&weight, &bias, &running_mean, &running_var});
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  mean = empty({l.C}, stat_options(x));
  rstd = empty({l.C}, stat_options(x));
  if (l.C == 0) return y;
  const Tensor affine = empty({2, l.C}, {.dtype = f64, .device = x.device()});  // scale, shift
  visit_floating(x.dtype(), "batch_norm", [&]<class T> {
    visit_floating(param, "batch_norm", [&]<class P> {
      const ChannelParams<P> p{pointer_or_null<P>(weight), pointer_or_null<P>(bias), pointer_or_null<P>(running_mean),
                               pointer_or_null<P>(running_var)};
      batch_norm_stats_kernel<T, P><<<int(l.C), kChannelThreads>>>(
          x.data_ptr<T>(), l, p, training, momentum, eps, mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(),
          affine.data_ptr<double>());
    });
    HG_CHECK_LAUNCH("batch_norm_stats_kernel");
    if (x.numel() == 0) return;
    batch_norm_affine_kernel<T><<<kernels::cuda::blocks_for(x.numel()), kernels::cuda::kThreads>>>(
        x.data_ptr<T>(), y.data_ptr<T>(), x.numel(), l, affine.data_ptr<double>());
    HG_CHECK_LAUNCH("batch_norm_affine_kernel");
  });
  return y;
}

void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         bool training, Tensor& dx, Tensor& dw, Tensor& db) {
  detail::check_cuda_device(x.device(), "batch_norm backward");
  const ChannelLayout l = channel_layout(x);
  const DType param = parameter_dtype("batch_norm backward", {&weight});
  dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dw = empty({l.C}, {.dtype = param, .device = x.device()});
  db = empty({l.C}, {.dtype = param, .device = x.device()});
  if (l.C == 0) return;
  const Tensor sums = empty({3, l.C}, {.dtype = f64, .device = x.device()});  // w, sum(g), sum(g * xhat)
  visit_floating(x.dtype(), "batch_norm backward", [&]<class T> {
    visit_floating(param, "batch_norm backward", [&]<class P> {
      batch_norm_grad_sums_kernel<T, P><<<int(l.C), kChannelThreads>>>(
          x.data_ptr<T>(), grad.data_ptr<T>(), l, pointer_or_null<P>(weight), mean.data_ptr<stat_t<T>>(),
          rstd.data_ptr<stat_t<T>>(), dw.data_ptr<P>(), db.data_ptr<P>(), sums.data_ptr<double>());
    });
    HG_CHECK_LAUNCH("batch_norm_grad_sums_kernel");
    if (x.numel() == 0) return;
    batch_norm_dx_kernel<T><<<kernels::cuda::blocks_for(x.numel()), kernels::cuda::kThreads>>>(
        x.data_ptr<T>(), grad.data_ptr<T>(), x.numel(), l, mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(),
        sums.data_ptr<double>(), training, dx.data_ptr<T>());
    HG_CHECK_LAUNCH("batch_norm_dx_kernel");
  });
}

Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t D, double eps,
                          Tensor& mean, Tensor& rstd) {
  detail::check_cuda_device(x.device(), "layer_norm");
  const DType param = parameter_dtype("layer_norm", {&weight, &bias});
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  mean = empty({rows}, stat_options(x));
  rstd = empty({rows}, stat_options(x));
  if (rows * D == 0) return y;
  visit_floating(x.dtype(), "layer_norm", [&]<class T> {
    visit_floating(param, "layer_norm", [&]<class P> {
      layer_norm_forward_kernel<T, P><<<row_blocks(rows), kernels::cuda::kThreads>>>(
          x.data_ptr<T>(), y.data_ptr<T>(), rows, D, eps, pointer_or_null<P>(weight),
          pointer_or_null<P>(bias), mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>());
    });
  });
  HG_CHECK_LAUNCH("layer_norm_forward_kernel");
  return y;
}

void layer_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         int64_t rows, int64_t D, Tensor& dx, Tensor& dw, Tensor& db) {
  detail::check_cuda_device(x.device(), "layer_norm backward");
  const DType param = parameter_dtype("layer_norm backward", {&weight});
  dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dw = empty({D}, {.dtype = param, .device = x.device()});  // flat, as on the CPU (kernels/norm.h)
  db = empty({D}, {.dtype = param, .device = x.device()});
  if (D == 0) return;
  visit_floating(x.dtype(), "layer_norm backward", [&]<class T> {
    visit_floating(param, "layer_norm backward", [&]<class P> {
      if (rows > 0) {
        layer_norm_dx_kernel<T, P><<<row_blocks(rows), kernels::cuda::kThreads>>>(
            x.data_ptr<T>(), grad.data_ptr<T>(), rows, D, pointer_or_null<P>(weight), mean.data_ptr<stat_t<T>>(),
            rstd.data_ptr<stat_t<T>>(), dx.data_ptr<T>());
        HG_CHECK_LAUNCH("layer_norm_dx_kernel");
      }
      // With no rows this still runs, writing the empty sums (zeros) into dw and db.
      const int column_blocks = int((D + kColumnTile - 1) / kColumnTile);
      layer_norm_weight_grad_kernel<T, P><<<column_blocks, dim3(kColumnTile, kRowLanes)>>>(
          x.data_ptr<T>(), grad.data_ptr<T>(), rows, D, mean.data_ptr<stat_t<T>>(), rstd.data_ptr<stat_t<T>>(),
          dw.data_ptr<P>(), db.data_ptr<P>());
    });
  });
  HG_CHECK_LAUNCH("layer_norm_weight_grad_kernel");
}

}  // namespace hg::kernels::cuda
