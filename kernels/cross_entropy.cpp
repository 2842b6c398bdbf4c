#include "kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/cross_entropy.h"

namespace hg::kernels {

namespace {

// f32 and 16-bit rows take their exps in float on the vectorised exp_f32 (libm's exp is a scalar
// call per logit: a tenth of a char-level GPT's step was spent there), summed in double; f64 rows,
// and rows whose max or lse is not finite (inf/NaN semantics), stay in double.
template <class T>
inline constexpr bool kFloatExps = !std::is_same_v<T, double>;

// log sum exp of one row (kernels/math/cross_entropy.h); `scratch` holds C floats.
// The max and the sum run in lanes (kernels/cpu/lane_sum.h): as single running values they were
// chains of dependent scalar operations (perf, a GPT's 256 classes: this function 4.6% -> 2.7%
// of the bf16 step).
template <class T>
double row_log_sum_exp(const T* row, int64_t C, float* scratch) {
  using A = Acc<T>;
  // (f32 rows on float_lanes.h's vectors: lane_max's NaN-wins compare stayed scalar and branchy)
  double max = 0;
  if constexpr (std::is_same_v<T, float>)
    max = double(cpu::float_row_max(row, C, -std::numeric_limits<float>::infinity(), /*nan_wins=*/true));
  else
    max = double(cpu::lane_max<A>(C, -std::numeric_limits<A>::infinity(), [row](int64_t c) { return A(row[c]); },
                                  [](A a, A b) { return math::nan_max(a, b); }));
  double total = 0;
  if (kFloatExps<T> && std::isfinite(max)) {
    // x - max in float: the same value as rounding the double difference (exact in double unless
    // the exponents are more than 29 apart, and then both round to -max), in 16 lanes, not 8.
    const float shift = float(max);
    const float* values = scratch;  // the row as floats (16-bit rows widened, exactly)
    if constexpr (std::is_same_v<T, float>) values = row;
    else if constexpr (kFloatExps<T>) convert_to_float(row, scratch, size_t(C));  // (f64 rows never get here)
    cpu::exp_minus_f32(values, shift, scratch, C);
    // (16 double lanes: two vectors' independent chains of adds, not one)
    total = cpu::lane_sum<double, 16>(C, [scratch](int64_t c) { return double(scratch[c]); });
  } else {
    for (int64_t c = 0; c < C; ++c) total += math::CrossEntropy::exp_term(double(Acc<T>(row[c])), max);
  }
  return math::CrossEntropy::log_sum_exp(max, total);
}

template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t N, int64_t C, double smoothing,
                             int64_t ignore_index) {
  const math::CrossEntropy f{smoothing, C};
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  parallel_for(0, N, grain_for(4 * C), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(C));
    for (int64_t i = lo; i < hi; ++i) {
      if (targets[i] == ignore_index) continue;
      const T* row = logits + i * C;
      const double lse = row_log_sum_exp(row, C, scratch.data());
      double row_mean = 0;
      if (smoothing > 0)
        for (int64_t c = 0; c < C; ++c) row_mean += double(Acc<T>(row[c])) / double(C);
      row_loss[size_t(i)] = f.loss(lse, double(Acc<T>(row[targets[i]])), row_mean);
    }
  });
  double total = 0;  // summed in row order: the same for any thread count
  for (double v : row_loss) total += v;
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t N, int64_t C, double smoothing,
                            int64_t ignore_index, double scale, T* grad) {
  const math::CrossEntropy f{smoothing, C};
  parallel_for(0, N, grain_for(4 * C), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(C));
    for (int64_t i = lo; i < hi; ++i) {
      T* g = grad + i * C;
      if (targets[i] == ignore_index) {
        std::fill(g, g + C, T(0.0f));
        continue;
      }
      const T* row = logits + i * C;
      const double lse = row_log_sum_exp(row, C, scratch.data());
      if (kFloatExps<T> && std::isfinite(lse)) {  // softmax(x)[c] = exp(x[c] - lse) on exp_f32's lanes
        for (int64_t c = 0; c < C; ++c) scratch[c] = float(double(Acc<T>(row[c])) - lse);
        cpu::exp_f32(scratch.data(), scratch.data(), C);
        for (int64_t c = 0; c < C; ++c)
          g[c] = T(Acc<T>(scale * (double(scratch[c]) - f.target_weight(c == targets[i]))));
        continue;
      }
      for (int64_t c = 0; c < C; ++c) g[c] = T(Acc<T>(scale * f.grad(double(Acc<T>(row[c])), lse, c == targets[i])));
    }
  });
}

// Checks every CPU target (scenario 12: every reduction) and returns how many are not ignored.
// (CUDA targets are checked by the kernel, without a device assert: kernels/cuda/loss.cu.)
int64_t check_targets(const Tensor& targets, int64_t C, int64_t ignore_index) {
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  int64_t valid = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore_index) continue;
    HG_CHECK(t[i] >= 0 && t[i] < C, "cross_entropy: Target ", t[i], " is out of bounds (", C,
             " classes; targets must be in [0, ", C, ") or ignore_index ", ignore_index, "), at position ", i);
    ++valid;
  }
  return valid;
}

}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, double smoothing, int64_t ignore_index) {
  CrossEntropyResult r;
  if (logits.device().is_cuda()) {
    r.loss = kernels::cuda::cross_entropy_forward(logits, targets, smoothing, ignore_index, r.rows.on_device);
    return r;
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  r.rows.count = check_targets(targets, C, ignore_index);
  const double total = visit_floating(logits.dtype(), "cross_entropy", [&]<class T> {
    return cross_entropy_forward<T>(logits.data_ptr<T>(), targets.data_ptr<int64_t>(), N, C, smoothing, ignore_index);
  });
  r.loss = full({}, total / double(r.rows.count), logits.options());
  return r;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& g, double smoothing,
                              int64_t ignore_index, const CrossEntropyRows& rows) {
  Tensor grad = empty(logits.shape(), logits.options());
  if (logits.device().is_cuda()) {
    kernels::cuda::cross_entropy_backward(logits, targets, g, smoothing, ignore_index, rows.on_device, grad);
    return grad;
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const double scale = g.item<double>() / double(rows.count);
  visit_floating(logits.dtype(), "cross_entropy", [&]<class T> {
    cross_entropy_backward<T>(logits.data_ptr<T>(), targets.data_ptr<int64_t>(), N, C, smoothing, ignore_index, scale,
                              grad.data_ptr<T>());
  });
  return grad;
}

}  // namespace hg::kernels
