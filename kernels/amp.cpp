// The GradScaler's CPU loops (see amp.h); a CUDA tensor goes to kernels/cuda/amp.cu.
#include "kernels/amp.h"

#include <type_traits>

#include "core/parallel.h"
#include "core/visit.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/scale_update.h"
#include "kernels/math/unscale.h"

namespace hg::kernels {

namespace {

constexpr int64_t kUnscaleChunk = 1 << 16;

struct UnscaleResult {
  bool found_inf = false;
  int64_t tiny = 0;  // zero or subnormal (f16 only)
};

// One pass over a gradient: flag non-finite values, count f16 zeros/subnormals, and multiply by
// 1/scale (unless check_only). Fixed chunks: the same result for any thread count.
template <class T>
UnscaleResult unscale_one(T* g, int64_t n, double scale, bool check_only) {
  using Rule = math::Unscale<Acc<T>>;
  const Rule unscale = Rule::of(scale);
  const int64_t chunks = (n + kUnscaleChunk - 1) / kUnscaleChunk;
  std::vector<UnscaleResult> partial(static_cast<size_t>(chunks));
  parallel_chunks(n, kUnscaleChunk, [&](int64_t c, int64_t lo, int64_t hi) {
    UnscaleResult r;
    for (int64_t i = lo; i < hi; ++i) {
      const Acc<T> v = Acc<T>(g[i]);
      const T unscaled = T(unscale(v));
      // Both the gradient and its unscaled value as stored must be finite (kernels/math/unscale.h).
      if (!Rule::finite(v) || !Rule::finite(Acc<T>(unscaled))) r.found_inf = true;
      if constexpr (std::is_same_v<T, half>) r.tiny += Rule::f16_tiny(v);
      if (!check_only) g[i] = unscaled;
    }
    partial[size_t(c)] = r;
  });
  UnscaleResult total;
  for (const UnscaleResult& r : partial) total.found_inf |= r.found_inf, total.tiny += r.tiny;
  return total;
}

}  // namespace

void unscale_and_check(const std::vector<Tensor>& grads, const std::vector<bool>& check_only, const Tensor& scale,
                       const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny) {
  if (scale.device().is_cuda()) return cuda::unscale_and_check(grads, check_only, scale, found_inf, nonfinite, tiny);
  const double s = double(*scale.data_ptr<float>());
  bool found = false;
  int64_t small = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const UnscaleResult r = visit_floating(g.dtype(), "unscale_", [&]<class T> {
      return unscale_one<T>(g.data_ptr<T>(), g.numel(), s, check_only[i]);
    });
    nonfinite.data_ptr<int32_t>()[i] = r.found_inf;
    found = found || r.found_inf;
    small += r.tiny;
  }
  *found_inf.data_ptr<float>() = found ? 1.0f : 0.0f;
  *tiny.data_ptr<int64_t>() = small;
}

void scaler_update(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped_in_a_row,
                   const Tensor& found_inf, const ScaleUpdateOptions& o, int32_t* skipped_mirror) {
  if (scale.device().is_cuda())
    return cuda::scaler_update(scale, growth_tracker, skipped_in_a_row, found_inf, o.growth_factor, o.backoff_factor,
                               o.growth_interval, o.min_scale, o.max_scale, skipped_mirror);
  const math::ScaleUpdate rule{o.growth_factor, o.backoff_factor, o.growth_interval, o.min_scale, o.max_scale};
  rule.apply(*scale.data_ptr<float>(), *growth_tracker.data_ptr<int32_t>(), *skipped_in_a_row.data_ptr<int32_t>(),
             *found_inf.data_ptr<float>() != 0.0f);
}

}  // namespace hg::kernels
