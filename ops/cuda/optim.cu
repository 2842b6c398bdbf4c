// SGD and Adam/AdamW as multi-tensor kernels: one launch updates up to 32 parameters. The kernels
// read the GradScaler's found_inf and scale on the device and leave everything untouched when a
// gradient overflowed, then a second tiny kernel advances the per-parameter step counts -- so an
// AMP step needs no host synchronisation. Same arithmetic as the CPU loops (optim/sgd.cpp,
// optim/adam.cpp), in the weight's compute type.
#include <map>
#include <utility>

#include "core/cuda/device_math.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda_ops.h"

namespace hg::cuda_ops {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

constexpr int kTensorsPerLaunch = 32;
constexpr int kBlocksPerTensor = 64;

// W: the weight updated (the parameter, or its f32 master); P: the parameter and gradient dtype.
template <class W, class P>
struct Batch {
  W* weight[kTensorsPerLaunch];
  P* param[kTensorsPerLaunch];   // null when the weight is the parameter
  const P* grad[kTensorsPerLaunch];
  W* state0[kTensorsPerLaunch];  // SGD momentum / Adam exp_avg (may be null for SGD without momentum)
  W* state1[kTensorsPerLaunch];  // Adam exp_avg_sq
  float* step[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  bool deferred[kTensorsPerLaunch];  // the gradient still carries the loss scale
  int count;
};

__device__ __forceinline__ bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

template <class W, class P>
__device__ __forceinline__ acc_t<W> load_grad(const Batch<W, P>& b, int t, int64_t i, float inv_scale) {
  acc_t<W> g = acc_t<W>(to_acc(b.grad[t][i]));
  return b.deferred[t] ? g * acc_t<W>(inv_scale) : g;
}

template <class W, class P>
__device__ __forceinline__ void store_weight(const Batch<W, P>& b, int t, int64_t i, acc_t<W> w) {
  b.weight[t][i] = from_acc<W>(w);
  if (b.param[t] != nullptr) b.param[t][i] = from_acc<P>(acc_t<P>(w));  // round the master into the parameter
}

template <class W, class P>
__global__ void sgd_kernel(Batch<W, P> b, SgdHyper h, const float* found_inf, const float* scale) {
  using A = acc_t<W>;
  if (skipped(found_inf)) return;
  const int t = blockIdx.x / kBlocksPerTensor, part = blockIdx.x % kBlocksPerTensor;
  if (t >= b.count) return;
  const float inv_scale = scale ? float(1.0 / double(*scale)) : 1.0f;
  const bool first = *b.step[t] == 0.0f;  // PyTorch: the first step's buffer is the gradient itself
  for (int64_t i = int64_t(part) * blockDim.x + threadIdx.x; i < b.numel[t]; i += int64_t(kBlocksPerTensor) * blockDim.x) {
    A w = to_acc(b.weight[t][i]);
    A d = load_grad(b, t, i, inv_scale) + A(h.weight_decay) * w;
    if (h.momentum != 0) {
      const A buf = first ? d : A(h.momentum) * to_acc(b.state0[t][i]) + A(1 - h.dampening) * d;
      b.state0[t][i] = from_acc<W>(buf);
      d = h.nesterov ? d + A(h.momentum) * buf : buf;
    }
    w -= A(h.lr) * d;
    store_weight(b, t, i, w);
  }
}

template <class W, class P>
__global__ void adam_kernel(Batch<W, P> b, AdamHyper h, const float* found_inf, const float* scale) {
  using A = acc_t<W>;
  if (skipped(found_inf)) return;
  const int t = blockIdx.x / kBlocksPerTensor, part = blockIdx.x % kBlocksPerTensor;
  if (t >= b.count) return;
  const float inv_scale = scale ? float(1.0 / double(*scale)) : 1.0f;
  const double step = double(*b.step[t]) + 1.0;  // this update's t (the count advances afterwards)
  const double step_size = h.lr / (1 - pow(h.beta1, step));
  const double bias_correction2_sqrt = sqrt(1 - pow(h.beta2, step));
  for (int64_t i = int64_t(part) * blockDim.x + threadIdx.x; i < b.numel[t]; i += int64_t(kBlocksPerTensor) * blockDim.x) {
    A w = to_acc(b.weight[t][i]);
    A g = load_grad(b, t, i, inv_scale);
    if (h.decoupled) w *= A(1 - h.lr * h.weight_decay);
    else if (h.weight_decay != 0) g += A(h.weight_decay) * w;
    const A m = to_acc(b.state0[t][i]) * A(h.beta1) + g * A(1 - h.beta1);
    const A v = to_acc(b.state1[t][i]) * A(h.beta2) + A(1 - h.beta2) * g * g;
    b.state0[t][i] = from_acc<W>(m);
    b.state1[t][i] = from_acc<W>(v);
    const A denom = sqrt(v) / A(bias_correction2_sqrt) + A(h.eps);
    w += A(-step_size) * (m / denom);
    store_weight(b, t, i, w);
  }
}

// Advances every parameter's step count unless the step was skipped (after the update kernel,
// which read the old count).
__global__ void advance_steps(Batch<float, float> counts, const float* found_inf) {
  if (skipped(found_inf) || int(threadIdx.x) >= counts.count) return;
  *counts.step[threadIdx.x] += 1.0f;
}

template <class W, class P>
Batch<W, P> make_batch(const std::vector<size_t>& members, const std::vector<Tensor>& weights,
                       const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>* s0,
                       const std::vector<Tensor>* s1, const std::vector<Tensor>& steps, const Tensor& scale) {
  Batch<W, P> b{};
  b.count = int(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    const size_t i = members[k];
    b.weight[k] = weights[i].data_ptr<W>();
    b.param[k] = weights[i].is_same(params[i]) ? nullptr : params[i].data_ptr<P>();
    b.grad[k] = grads[i].data_ptr<P>();
    b.state0[k] = s0 && (*s0)[i].defined() ? (*s0)[i].data_ptr<W>() : nullptr;
    b.state1[k] = s1 ? (*s1)[i].data_ptr<W>() : nullptr;
    b.step[k] = steps[i].data_ptr<float>();
    b.numel[k] = weights[i].numel();
    b.deferred[k] = scale.defined() && b.param[k] != nullptr;  // 16-bit gradients of a master weight
  }
  return b;
}

// Runs `launch(members)` over the parameters, grouped by their (weight, parameter) dtype pair --
// equal dtypes, or an f32 master for a 16-bit parameter -- in launches of kTensorsPerLaunch.
template <class Launch>
void for_each_batch(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                    const std::vector<Tensor>& steps, const float* found_inf, const Launch& launch) {
  HG_CHECK(!weights.empty(), "optimizer: no parameters");
  std::map<std::pair<DType, DType>, std::vector<size_t>> by_dtypes;
  for (size_t i = 0; i < weights.size(); ++i) by_dtypes[{weights[i].dtype(), params[i].dtype()}].push_back(i);
  for (const auto& [dtypes, indices] : by_dtypes) {
    for (size_t first = 0; first < indices.size(); first += kTensorsPerLaunch) {
      const std::vector<size_t> members(indices.begin() + long(first),
                                        indices.begin() + long(std::min(indices.size(), first + kTensorsPerLaunch)));
      visit_floating(dtypes.first, "optimizer", [&]<class W> {
        visit_floating(dtypes.second, "optimizer", [&]<class P> {
          if constexpr (std::is_same_v<W, P> || (std::is_same_v<W, float> && !std::is_same_v<P, double>)) {
            launch.template operator()<W, P>(members);
          } else {
            HG_FAIL("optimizer (CUDA): a ", dtype_of<W>(), " master for ", dtype_of<P>(), " parameters is not supported");
          }
        });
      });
      Batch<float, float> counts{};
      counts.count = int(members.size());
      for (size_t k = 0; k < members.size(); ++k) counts.step[k] = steps[members[k]].data_ptr<float>();
      advance_steps<<<1, kTensorsPerLaunch>>>(counts, found_inf);
      HG_CUDA_CHECK(cudaGetLastError());
    }
  }
}

const float* optional_ptr(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

}  // namespace

void sgd_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum, const std::vector<Tensor>& steps, const SgdHyper& h,
                const Tensor& found_inf, const Tensor& scale) {
  detail::check_cuda_device(params.front().device(), "SGD");
  for_each_batch(weights, params, steps, optional_ptr(found_inf), [&]<class W, class P>(const std::vector<size_t>& members) {
    const auto b = make_batch<W, P>(members, weights, params, grads, &momentum, nullptr, steps, scale);
    sgd_kernel<W, P><<<b.count * kBlocksPerTensor, cuda_detail::kThreads>>>(b, h, optional_ptr(found_inf), optional_ptr(scale));
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

void adam_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq, const std::vector<Tensor>& steps,
                 const AdamHyper& h, const Tensor& found_inf, const Tensor& scale) {
  detail::check_cuda_device(params.front().device(), "Adam");
  for_each_batch(weights, params, steps, optional_ptr(found_inf), [&]<class W, class P>(const std::vector<size_t>& members) {
    const auto b = make_batch<W, P>(members, weights, params, grads, &exp_avg, &exp_avg_sq, steps, scale);
    adam_kernel<W, P><<<b.count * kBlocksPerTensor, cuda_detail::kThreads>>>(b, h, optional_ptr(found_inf), optional_ptr(scale));
    HG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace hg::cuda_ops
