// GPU AMP: the GradScaler's fused unscale-and-check over many gradients, and its scale update,
// as kernels that read and write device flags only -- a training step never waits for the GPU.
// (CPU twins: amp/grad_scaler.cpp.)
#include "core/cuda/device_math.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda_ops.h"

namespace hg::cuda_ops {

namespace {

using cuda_detail::acc_t;

// ---- multi-tensor unscale ------------------------------------------------------------------------

constexpr int kTensorsPerLaunch = 64;
constexpr int kBlocksPerTensor = 32;  // each tensor's blocks stride over it

template <class T>
struct UnscaleBatch {
  T* data[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  int flag_index[kTensorsPerLaunch];  // where this gradient's inf flag goes in `nonfinite`
  bool check_only[kTensorsPerLaunch];
  int count;
};

template <class T>
__global__ void unscale_kernel(UnscaleBatch<T> batch, const float* scale, float* found_inf, int32_t* nonfinite,
                               unsigned long long* tiny) {
  const int t = blockIdx.x / kBlocksPerTensor, part = blockIdx.x % kBlocksPerTensor;
  if (t >= batch.count) return;
  // NOTE: 1/scale in f64, rounded once to f32 (exact for powers of two), as on the CPU.
  const float inv = float(1.0 / double(*scale));
  T* g = batch.data[t];
  bool bad = false;
  unsigned long long small = 0;
  for (int64_t i = int64_t(part) * blockDim.x + threadIdx.x; i < batch.numel[t]; i += int64_t(kBlocksPerTensor) * blockDim.x) {
    const float v = float(cuda_detail::to_acc(g[i]));
    bad |= !isfinite(v);
    if constexpr (std::is_same_v<T, half>) small += (g[i].bits & 0x7c00) == 0;  // zero or subnormal
    if (!batch.check_only[t]) g[i] = cuda_detail::from_acc<T>(acc_t<T>(v * inv));
  }
  // Every writer writes the same value, so the races below are benign.
  if (bad) {
    *found_inf = 1.0f;
    nonfinite[batch.flag_index[t]] = 1;
  }
  if constexpr (std::is_same_v<T, half>) {
    if (small) atomicAdd(tiny, small);  // integer atomics: the total is exact in any order
  }
}

template <class T>
void launch_unscale(const std::vector<int>& members, const std::vector<Tensor>& grads, const std::vector<bool>& check_only,
                    const Tensor& scale, const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny) {
  for (size_t first = 0; first < members.size(); first += kTensorsPerLaunch) {
    UnscaleBatch<T> batch{};
    batch.count = int(std::min<size_t>(kTensorsPerLaunch, members.size() - first));
    for (int k = 0; k < batch.count; ++k) {
      const int i = members[first + size_t(k)];
      batch.data[k] = grads[size_t(i)].data_ptr<T>();
      batch.numel[k] = grads[size_t(i)].numel();
      batch.flag_index[k] = i;
      batch.check_only[k] = check_only[size_t(i)];
    }
    unscale_kernel<T><<<batch.count * kBlocksPerTensor, cuda_detail::kThreads>>>(
        batch, scale.data_ptr<float>(), found_inf.data_ptr<float>(), nonfinite.data_ptr<int32_t>(),
        reinterpret_cast<unsigned long long*>(tiny.data_ptr<int64_t>()));
    HG_CUDA_CHECK(cudaGetLastError());
  }
}

// ---- the scale update (PyTorch's _amp_update_scale_), one thread --------------------------------

__global__ void scaler_update_kernel(float* scale, int32_t* tracker, int32_t* skipped, const float* found,
                                     double growth_factor, double backoff_factor, int64_t growth_interval,
                                     double min_scale, double max_scale) {
  if (*found != 0.0f) {
    *scale = fmaxf(float(*scale * backoff_factor), float(min_scale));
    *tracker = 0;
    *skipped += 1;
    return;
  }
  *skipped = 0;
  if (++*tracker == growth_interval) {
    const float grown = float(double(*scale) * growth_factor);
    if (isfinite(grown) && double(grown) <= fmax(max_scale, double(*scale))) *scale = grown;
    *tracker = 0;
  }
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, const std::vector<bool>& check_only, const Tensor& scale,
                       const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny) {
  detail::check_cuda_device(scale.device(), "GradScaler.unscale_");
  // One launch (or a few, 64 tensors each) per dtype.
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
                   double min_scale, double max_scale) {
  detail::check_cuda_device(scale.device(), "GradScaler.update");
  scaler_update_kernel<<<1, 1>>>(scale.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                                 skipped_in_a_row.data_ptr<int32_t>(), found_inf.data_ptr<float>(), growth_factor,
                                 backoff_factor, growth_interval, min_scale, max_scale);
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hg::cuda_ops
