// SGD, Adam/AdamW and the adaptive rules (RMSprop, Adagrad, Adadelta) as multi-tensor kernels (multi_tensor.cuh): one launch updates many
// parameters, with a grid sized by their elements. The kernels read the GradScaler's found_inf
// and scale on the device and leave everything untouched when a gradient overflowed; a second
// tiny kernel then advances the per-parameter step counts -- so an AMP step needs no host
// synchronisation. The update rules are the CPU loops' own (kernels/math/optimizer_step.h), in the
// weight's compute type.
#include <array>
#include <map>
#include <utility>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;

// W: the weight updated (the parameter, or its f32 master); P: the parameter and gradient dtype.
template <class W, class P>
struct ParamMeta {
  W* weight;
  P* param;  // null when the weight is the parameter
  const P* grad;
  W* state0;  // SGD momentum / Adam exp_avg / the adaptive rules' first slot (null: none)
  W* state1;  // Adam exp_avg_sq / the adaptive rules' second slot
  W* state2;  // the adaptive rules' third slot (RMSprop's grad_avg)
  const int64_t* step;           // Adam: steps applied so far
  const int32_t* momentum_ready;  // SGD: 0 until the momentum buffer holds a value
  int64_t numel;
  bool deferred;  // the gradient still carries the loss scale
};
constexpr int kParamTensors = 24;
template <class W, class P>
using ParamTable = kernels::cuda::ChunkTable<ParamMeta<W, P>, kParamTensors>;
static_assert(sizeof(ParamTable<double, double>) <= 4000, "kernel arguments must stay under 4 KiB");

__device__ __forceinline__ bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// One 4-element group of a chunk: the arrays' values in the weight's compute type.
template <class W, class P>
struct Group {
  acc_t<W> w[kVec], g[kVec], s0[kVec], s1[kVec], s2[kVec];
};

// Loads the group at element i of the chunk starting at `start`; the gradient is unscaled when it
// still carries the loss scale.
template <class W, class P>
__device__ __forceinline__ Group<W, P> load_group(const ParamMeta<W, P>& m, int64_t start, int64_t i, int64_t n,
                                                  bool wide, double inv_scale) {
  using A = acc_t<W>;
  Group<W, P> v{};
  load_vec(m.weight + start, i, n, wide, v.w);
  acc_t<P> g[kVec];
  load_vec(m.grad + start, i, n, wide, g);
  for (int j = 0; j < kVec; ++j) v.g[j] = m.deferred ? A(g[j]) * A(inv_scale) : A(g[j]);
  if (m.state0) load_vec(m.state0 + start, i, n, wide, v.s0);
  if (m.state1) load_vec(m.state1 + start, i, n, wide, v.s1);
  if (m.state2) load_vec(m.state2 + start, i, n, wide, v.s2);
  return v;
}

// Stores the weight and states, and rounds the master into the 16-bit parameter.
template <class W, class P>
__device__ __forceinline__ void store_group(const ParamMeta<W, P>& m, int64_t start, int64_t i, int64_t n, bool wide,
                                            const Group<W, P>& v) {
  store_vec(m.weight + start, i, n, wide, v.w);
  if (m.state0) store_vec(m.state0 + start, i, n, wide, v.s0);
  if (m.state1) store_vec(m.state1 + start, i, n, wide, v.s1);
  if (m.state2) store_vec(m.state2 + start, i, n, wide, v.s2);
  if (m.param) {
    acc_t<P> p[kVec];
    for (int j = 0; j < kVec; ++j) p[j] = acc_t<P>(v.w[j]);
    store_vec(m.param + start, i, n, wide, p);
  }
}

// Whether every array of this chunk allows 4-wide accesses.
template <class W, class P>
__device__ __forceinline__ bool chunk_is_wide(const ParamMeta<W, P>& m, int64_t start, int64_t n) {
  return n % kVec == 0 && vec_aligned(m.weight + start) && vec_aligned(m.grad + start) &&
         (!m.state0 || vec_aligned(m.state0 + start)) && (!m.state1 || vec_aligned(m.state1 + start)) &&
         (!m.state2 || vec_aligned(m.state2 + start)) &&
         (!m.param || vec_aligned(m.param + start));
}

template <class W, class P>
__global__ void sgd_kernel(ParamTable<W, P> table, SgdHyper h, const float* found_inf, const float* scale) {
  using A = acc_t<W>;
  if (skipped(found_inf)) return;
  const auto c = kernels::cuda::block_chunk(table);
  const ParamMeta<W, P>& m = c.meta;
  const double inv_scale = scale ? 1.0 / double(*scale) : 1.0;
  // PyTorch's rule, as on the CPU: the step that finds no momentum buffer makes it the gradient.
  const bool first = m.momentum_ready != nullptr && *m.momentum_ready == 0;
  const bool wide = chunk_is_wide(m, c.start, c.n);
  for (int64_t i = int64_t(threadIdx.x) * kVec; i < c.n; i += int64_t(blockDim.x) * kVec) {
    Group<W, P> v = load_group(m, c.start, i, c.n, wide, inv_scale);
    for (int j = 0; j < kVec; ++j) {
      h.apply(v.w[j], v.g[j], v.s0[j], first);
    }
    store_group(m, c.start, i, c.n, wide, v);
  }
}

template <class W, class P>
__global__ void adam_kernel(ParamTable<W, P> table, AdamHyper h, const float* found_inf, const float* scale) {
  using A = acc_t<W>;
  if (skipped(found_inf)) return;
  const auto c = kernels::cuda::block_chunk(table);
  const ParamMeta<W, P>& m = c.meta;
  const double inv_scale = scale ? 1.0 / double(*scale) : 1.0;
  // NOTE: the count is an integer on the device: an f32 count would stop at 2^24.
  const double step = double(*m.step) + 1.0;  // this update's t (the count advances afterwards)
  const math::AdamStep::Factors factors = h.factors(step);
  const bool wide = chunk_is_wide(m, c.start, c.n);
  for (int64_t i = int64_t(threadIdx.x) * kVec; i < c.n; i += int64_t(blockDim.x) * kVec) {
    Group<W, P> v = load_group(m, c.start, i, c.n, wide, inv_scale);
    for (int j = 0; j < kVec; ++j) {
      h.apply(v.w[j], v.g[j], v.s0[j], v.s1[j], factors);
    }
    store_group(m, c.start, i, c.n, wide, v);
  }
}

// RMSprop, Adagrad, Adadelta: one kernel for the rules of one shape (kernels/math/optimizer_step.h),
// the absent slots zeros in registers. Rules that count steps (Adagrad) read the parameter's count.
template <class W, class P, class Rule>
__global__ void rule_kernel(ParamTable<W, P> table, Rule rule, const float* found_inf, const float* scale) {
  if (skipped(found_inf)) return;
  const auto c = kernels::cuda::block_chunk(table);
  const ParamMeta<W, P>& m = c.meta;
  const double inv_scale = scale ? 1.0 / double(*scale) : 1.0;
  const auto k = rule.constants(m.step ? double(*m.step) + 1.0 : 0.0);  // this update's t
  const bool wide = chunk_is_wide(m, c.start, c.n);
  for (int64_t i = int64_t(threadIdx.x) * kVec; i < c.n; i += int64_t(blockDim.x) * kVec) {
    Group<W, P> v = load_group(m, c.start, i, c.n, wide, inv_scale);
    for (int j = 0; j < kVec; ++j) rule.apply(v.w[j], v.g[j], v.s0[j], v.s1[j], v.s2[j], k);
    store_group(m, c.start, i, c.n, wide, v);
  }
}

// After the update kernels (which read the old counts): unless the step was skipped, every
// parameter's count advances, every flag is set, and the optimizer's applied-steps count grows.
constexpr int kCountersPerLaunch = 128;
struct Counters {
  int64_t* step[kCountersPerLaunch];
  int32_t* flag[kCountersPerLaunch];
  int count;
};
static_assert(sizeof(Counters) <= 4000, "kernel arguments must stay under 4 KiB");

__global__ void advance_counters_kernel(Counters counters, int64_t* applied, const float* found_inf) {
  if (skipped(found_inf)) return;
  const int k = int(threadIdx.x);
  if (k < counters.count) {
    if (counters.step[k]) *counters.step[k] += 1;
    if (counters.flag[k]) *counters.flag[k] = 1;
  }
  if (k == 0 && applied != nullptr) *applied += 1;
}

template <class W, class P>
ParamMeta<W, P> meta_of(size_t i, const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& grads, const std::vector<Tensor>* s0, const std::vector<Tensor>* s1,
                        const std::vector<Tensor>* steps, const std::vector<Tensor>* ready, const Tensor& scale) {
  ParamMeta<W, P> m{};
  m.weight = weights[i].data_ptr<W>();
  m.param = weights[i].is_same(params[i]) ? nullptr : params[i].data_ptr<P>();
  m.grad = grads[i].data_ptr<P>();
  m.state0 = s0 && (*s0)[i].defined() ? (*s0)[i].data_ptr<W>() : nullptr;
  m.state1 = s1 ? (*s1)[i].data_ptr<W>() : nullptr;
  m.step = steps ? (*steps)[i].data_ptr<int64_t>() : nullptr;
  m.momentum_ready = ready && (*ready)[i].defined() ? (*ready)[i].data_ptr<int32_t>() : nullptr;
  m.numel = weights[i].numel();
  m.deferred = scale.defined() && m.param != nullptr;  // 16-bit gradients of a master weight
  return m;
}

// Runs `launch.operator()<W, P>(members)` for the parameters grouped by their (weight,
// parameter) dtype pair -- equal dtypes, or an f32 master for a 16-bit parameter.
template <class Launch>
void for_each_dtype_pair(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const Launch& launch) {
  HG_CHECK(!weights.empty(), "optimizer: no parameters");
  std::map<std::pair<DType, DType>, std::vector<size_t>> by_dtypes;
  for (size_t i = 0; i < weights.size(); ++i) by_dtypes[{weights[i].dtype(), params[i].dtype()}].push_back(i);
  for (const auto& [dtypes, members] : by_dtypes) {
    visit_floating(dtypes.first, "optimizer", [&]<class W> {
      visit_floating(dtypes.second, "optimizer", [&]<class P> {
        if constexpr (std::is_same_v<W, P> || (std::is_same_v<W, float> && !std::is_same_v<P, double>)) {
          launch.template operator()<W, P>(members);
        } else {
          HG_FAIL("optimizer (CUDA): a ", dtype_of<W>(), " master for ", dtype_of<P>(), " parameters is not supported");
        }
      });
    });
  }
}


const float* optional_ptr(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

template <class Rule>
void launch_rule(const char* name, const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                 const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                 const std::vector<Tensor>* steps, const Rule& rule, const Tensor& found_inf, const Tensor& scale) {
  detail::check_cuda_device(params.front().device(), name);
  for_each_dtype_pair(weights, params, [&]<class W, class P>(const std::vector<size_t>& members) {
    std::vector<ParamMeta<W, P>> metas;
    std::vector<int64_t> numels;
    for (size_t i : members) {
      ParamMeta<W, P> m = meta_of<W, P>(i, weights, params, grads, nullptr, nullptr, steps, nullptr, scale);
      W* slot[3];
      for (int s = 0; s < 3; ++s) slot[s] = slots[i][size_t(s)].defined() ? slots[i][size_t(s)].data_ptr<W>() : nullptr;
      m.state0 = slot[0], m.state1 = slot[1], m.state2 = slot[2];
      metas.push_back(m);
      numels.push_back(weights[i].numel());
    }
    kernels::cuda::launch_chunked<ParamMeta<W, P>, kParamTensors>(metas, numels, [&](const ParamTable<W, P>& t, int blocks) {
      rule_kernel<W, P, Rule><<<blocks, kernels::cuda::kThreads>>>(t, rule, optional_ptr(found_inf), optional_ptr(scale));
      HG_CHECK_LAUNCH(name);
    });
  });
}

}  // namespace

void sgd_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum, const std::vector<Tensor>& momentum_ready, const SgdHyper& h,
                const Tensor& found_inf, const Tensor& scale) {
  detail::check_cuda_device(params.front().device(), "SGD");
  for_each_dtype_pair(weights, params, [&]<class W, class P>(const std::vector<size_t>& members) {
    std::vector<ParamMeta<W, P>> metas;
    std::vector<int64_t> numels;
    for (size_t i : members) {
      metas.push_back(meta_of<W, P>(i, weights, params, grads, &momentum, nullptr, nullptr, &momentum_ready, scale));
      numels.push_back(weights[i].numel());
    }
    kernels::cuda::launch_chunked<ParamMeta<W, P>, kParamTensors>(metas, numels, [&](const ParamTable<W, P>& t, int blocks) {
      sgd_kernel<W, P><<<blocks, kernels::cuda::kThreads>>>(t, h, optional_ptr(found_inf), optional_ptr(scale));
      HG_CHECK_LAUNCH("sgd_kernel");
    });
  });
}

void adam_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq, const std::vector<Tensor>& steps,
                 const AdamHyper& h, const Tensor& found_inf, const Tensor& scale) {
  detail::check_cuda_device(params.front().device(), "Adam");
  for_each_dtype_pair(weights, params, [&]<class W, class P>(const std::vector<size_t>& members) {
    std::vector<ParamMeta<W, P>> metas;
    std::vector<int64_t> numels;
    for (size_t i : members) {
      metas.push_back(meta_of<W, P>(i, weights, params, grads, &exp_avg, &exp_avg_sq, &steps, nullptr, scale));
      numels.push_back(weights[i].numel());
    }
    kernels::cuda::launch_chunked<ParamMeta<W, P>, kParamTensors>(metas, numels, [&](const ParamTable<W, P>& t, int blocks) {
      adam_kernel<W, P><<<blocks, kernels::cuda::kThreads>>>(t, h, optional_ptr(found_inf), optional_ptr(scale));
      HG_CHECK_LAUNCH("adam_kernel");
    });
  });
}

void rmsprop_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                    const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                    const math::RmspropStep& h, const Tensor& found_inf, const Tensor& scale) {
  launch_rule("RMSprop", weights, params, grads, slots, nullptr, h, found_inf, scale);
}

void adagrad_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                    const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                    const std::vector<Tensor>& steps, const math::AdagradStep& h, const Tensor& found_inf,
                    const Tensor& scale) {
  launch_rule("Adagrad", weights, params, grads, slots, &steps, h, found_inf, scale);
}

void adadelta_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                     const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                     const math::AdadeltaStep& h, const Tensor& found_inf, const Tensor& scale) {
  launch_rule("Adadelta", weights, params, grads, slots, nullptr, h, found_inf, scale);
}

void advance_step_counts(const std::vector<Tensor>& steps, const std::vector<Tensor>& flags, const Tensor& applied,
                         const Tensor& found_inf) {
  detail::check_cuda_device(applied.device(), "optimizer");
  const size_t n = std::max(steps.size(), flags.size());
  size_t first = 0;
  do {  // at least one launch: the applied count advances even when no parameter had a gradient
    Counters c{};
    c.count = int(std::min<size_t>(kCountersPerLaunch, n - first));
    for (int k = 0; k < c.count; ++k) {
      const size_t i = first + size_t(k);
      c.step[k] = i < steps.size() ? steps[i].data_ptr<int64_t>() : nullptr;
      c.flag[k] = i < flags.size() && flags[i].defined() ? flags[i].data_ptr<int32_t>() : nullptr;
    }
    advance_counters_kernel<<<1, kCountersPerLaunch>>>(c, first == 0 ? applied.data_ptr<int64_t>() : nullptr,
                                                       optional_ptr(found_inf));
    HG_CHECK_LAUNCH("advance_counters_kernel");
    first += kCountersPerLaunch;
  } while (first < n);
}

}  // namespace hg::kernels::cuda
