// GPU AMP: the GradScaler's fused unscale-and-check over many gradients, and its scale update,
// as kernels that read and write device flags only -- a training step never waits for the GPU.
// (The element rules are kernels/math/unscale.h and scale_update.h, which the CPU runs too.) The unscale pass is a multi-tensor launch (multi_tensor.cuh):
// its grid follows the gradients' sizes.
#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/scale_update.h"
#include "kernels/math/unscale.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

// ---- multi-tensor unscale ------------------------------------------------------------------------

template <class T>
struct UnscaleMeta {
  T* data;
  int64_t numel;
  int32_t flag_index;  // where this gradient's inf flag goes in `nonfinite`
  bool check_only;     // flag only: the gradient stays scaled (the optimizer unscales it)
};
constexpr int kUnscaleTensors = 64;
template <class T>
using UnscaleTable = kernels::cuda::ChunkTable<UnscaleMeta<T>, kUnscaleTensors>;
static_assert(sizeof(UnscaleTable<double>) <= 4000, "kernel arguments must stay under 4 KiB");

template <class T>
__global__ void unscale_kernel(UnscaleTable<T> table, const float* scale, float* found_inf, int32_t* nonfinite,
                               unsigned long long* tiny) {
  using A = acc_t<T>;  // f32 for 16-bit and f32 gradients, f64 for f64 ones
  using Rule = math::Unscale<A>;  // the element rule, shared with the CPU loop
  const auto chunk = kernels::cuda::block_chunk(table);
  T* g = chunk.meta.data + chunk.start;
  const Rule unscale = Rule::of(double(*scale));
  const bool wide = kernels::cuda::vec_aligned(g) && chunk.n % kVec == 0;
  bool bad = false;
  unsigned long long small = 0;
  for (int64_t i = int64_t(threadIdx.x) * kVec; i < chunk.n; i += int64_t(blockDim.x) * kVec) {
    A v[kVec];
    kernels::cuda::load_vec(g, i, chunk.n, wide, v);
    for (int j = 0; j < kVec; ++j) {
      if (i + j >= chunk.n) break;
      if constexpr (std::is_same_v<T, half>) small += Rule::f16_tiny(v[j]);
      const A unscaled = unscale(v[j]);
      // The value as stored must be finite too (see kernels/math/unscale.h).
      bad |= !Rule::finite(v[j]) || !Rule::finite(to_acc(from_acc<T>(unscaled)));
      v[j] = unscaled;
    }
    if (!chunk.meta.check_only) kernels::cuda::store_vec(g, i, chunk.n, wide, v);
  }
  // Every writer writes the same value, so the races below are benign.
  if (bad) {
    *found_inf = 1.0f;
    nonfinite[chunk.meta.flag_index] = 1;
  }
  if constexpr (std::is_same_v<T, half>) {
    small = kernels::cuda::warp_sum(small);
    if (threadIdx.x % kernels::cuda::kWarp == 0 && small) atomicAdd(tiny, small);  // exact in any order
  }
}

template <class T>
void launch_unscale(const std::vector<int>& members, const std::vector<Tensor>& grads, const std::vector<bool>& check_only,
                    const Tensor& scale, const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny) {
  std::vector<UnscaleMeta<T>> metas;
  std::vector<int64_t> numels;
  for (int i : members) {
    const Tensor& g = grads[size_t(i)];
    metas.push_back({g.data_ptr<T>(), g.numel(), i, bool(check_only[size_t(i)])});
    numels.push_back(g.numel());
  }
  kernels::cuda::launch_chunked<UnscaleMeta<T>, kUnscaleTensors>(metas, numels, [&](const UnscaleTable<T>& table, int blocks) {
    unscale_kernel<T><<<blocks, kernels::cuda::kThreads>>>(table, scale.data_ptr<float>(), found_inf.data_ptr<float>(),
                                                         nonfinite.data_ptr<int32_t>(),
                                                         reinterpret_cast<unsigned long long*>(tiny.data_ptr<int64_t>()));
    HG_CHECK_LAUNCH("unscale_kernel");
  });
}

// ---- the scale update (PyTorch's _amp_update_scale_), one thread --------------------------------

// `skipped_mirror` (mapped host memory, may be null) receives the skip count too, so that the
// host can watch it without waiting for the GPU.
__global__ void scaler_update_kernel(float* scale, int32_t* tracker, int32_t* skipped, const float* found,
                                     double growth_factor, double backoff_factor, int64_t growth_interval,
                                     double min_scale, double max_scale, volatile int32_t* skipped_mirror) {
  const math::ScaleUpdate rule{growth_factor, backoff_factor, growth_interval, min_scale, max_scale};
  rule.apply(*scale, *tracker, *skipped, *found != 0.0f);
  if (skipped_mirror != nullptr) *skipped_mirror = *skipped;
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, const std::vector<bool>& check_only, const Tensor& scale,
                       const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny) {
  detail::check_cuda_device(scale.device(), "GradScaler.unscale_");
  // One multi-tensor pass (or a few launches) per dtype.
  for (DType dtype : {f32, f16, bf16, f64}) {
    std::vector<int> members;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].dtype() == dtype && grads[i].numel() > 0) members.push_back(int(i));
    if (members.empty()) continue;
    visit_floating(dtype, "unscale_", [&]<class T> { launch_unscale<T>(members, grads, check_only, scale, found_inf, nonfinite, tiny); });
  }
}

void scaler_update(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped_in_a_row,
                   const Tensor& found_inf, double growth_factor, double backoff_factor, int64_t growth_interval,
                   double min_scale, double max_scale, int32_t* skipped_mirror) {
  detail::check_cuda_device(scale.device(), "GradScaler.update");
  scaler_update_kernel<<<1, 1>>>(scale.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                                 skipped_in_a_row.data_ptr<int32_t>(), found_inf.data_ptr<float>(), growth_factor,
                                 backoff_factor, growth_interval, min_scale, max_scale, skipped_mirror);
  HG_CHECK_LAUNCH("scaler_update_kernel");
}

}  // namespace hg::kernels::cuda
