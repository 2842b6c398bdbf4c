// cross_entropy (fused log-softmax + negative log-likelihood with label smoothing) and mse_loss.
//
// The row formulas (loss and gradient, with label smoothing) are kernels/math/cross_entropy.h, shared
// with the CUDA kernels. The batch loss is the mean over rows whose target is not ignore_index.
#include "ops/loss.h"

#include <cmath>
#include <limits>
#include <vector>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/elementwise.h"
#include "kernels/math/cross_entropy.h"
#include "ops/reduce.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace {

// ---- kernels --------------------------------------------------------------------------------------

// log sum exp of one row (kernels/math/cross_entropy.h).
template <class T>
double row_log_sum_exp(const T* row, int64_t C) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < C; ++c) max = math::nan_max(max, double(Acc<T>(row[c])));
  double total = 0;
  for (int64_t c = 0; c < C; ++c) total += math::CrossEntropy::exp_term(double(Acc<T>(row[c])), max);
  return math::CrossEntropy::log_sum_exp(max, total);
}

template <class T>
double cross_entropy_forward(const T* logits, const int64_t* targets, int64_t N, int64_t C,
                             const CrossEntropyOptions& o) {
  const math::CrossEntropy f{o.label_smoothing, C};
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
  parallel_for(0, N, grain_for(4 * C), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (targets[i] == o.ignore_index) continue;
      const T* row = logits + i * C;
      const double lse = row_log_sum_exp(row, C);
      double row_mean = 0;
      if (o.label_smoothing > 0)
        for (int64_t c = 0; c < C; ++c) row_mean += double(Acc<T>(row[c])) / double(C);
      row_loss[size_t(i)] = f.loss(lse, double(Acc<T>(row[targets[i]])), row_mean);
    }
  });
  double total = 0;  // summed in row order: the same for any thread count
  for (double v : row_loss) total += v;
  return total;
}

template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t N, int64_t C, const CrossEntropyOptions& o,
                            double scale, T* grad) {
  const math::CrossEntropy f{o.label_smoothing, C};
  parallel_for(0, N, grain_for(4 * C), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T* g = grad + i * C;
      if (targets[i] == o.ignore_index) {
        std::fill(g, g + C, T(0.0f));
        continue;
      }
      const T* row = logits + i * C;
      const double lse = row_log_sum_exp(row, C);
      for (int64_t c = 0; c < C; ++c) g[c] = T(Acc<T>(scale * f.grad(double(Acc<T>(row[c])), lse, c == targets[i])));
    }
  });
}

// Checks every CPU target (scenario 12: every reduction) and returns how many are not ignored.
// (CUDA targets are checked by the kernel, without a device assert: kernels/cuda/loss.cu.)
int64_t check_targets(const Tensor& targets, int64_t C, const CrossEntropyOptions& o) {
  const std::vector<int64_t> t = targets.to_vector<int64_t>();
  int64_t valid = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == o.ignore_index) continue;
    HG_CHECK(t[i] >= 0 && t[i] < C, "cross_entropy: Target ", t[i], " is out of bounds (", C,
             " classes; targets must be in [0, ", C, ") or ignore_index ", o.ignore_index, "), at position ", i);
    ++valid;
  }
  return valid;
}

}  // namespace

// ---- cross_entropy ----------------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, CrossEntropyOptions options) {
  auto [logits0] = amp::prepare(amp::Op::CrossEntropy, logits_in);
  HG_CHECK(logits0.dim() == 2, "cross_entropy: logits must be 2-D (N, C), got ", logits0.shape());
  HG_CHECK(is_floating(logits0.dtype()), "cross_entropy: logits must be floating, got ", logits0.dtype());
  HG_CHECK(targets.dtype() == i64, "cross_entropy: targets must be i64 class indices, got ", targets.dtype());
  HG_CHECK(targets.dim() == 1 && targets.shape()[0] == logits0.shape()[0], "cross_entropy: expected targets of shape [",
           logits0.shape()[0], "] for logits ", logits0.shape(), ", got ", targets.shape());
  HG_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  detail::check_same_device("cross_entropy", logits0, targets);
  const int64_t N = logits0.shape()[0], C = logits0.shape()[1];
  const Tensor logits = logits0.contiguous(), t = targets.contiguous();

  // NOTE: with no valid row the mean is 0/0 = NaN, PyTorch's documented behaviour.
  // On a GPU the targets are checked and counted by the kernels (valid_on_device), so the call
  // never waits for the GPU; a bad target surfaces as an hg::Error at the next synchronisation.
  Tensor out, valid_on_device;
  int64_t valid = 0;
  if (logits.device().is_cuda()) {
    out = cuda_kernels::cross_entropy_forward(logits, t, options.label_smoothing, options.ignore_index, valid_on_device);
  } else {
    valid = check_targets(targets, C, options);
    const double total = visit_floating(logits.dtype(), "cross_entropy", [&]<class T> {
      return cross_entropy_forward<T>(logits.data_ptr<T>(), t.data_ptr<int64_t>(), N, C, options);
    });
    out = full({}, total / double(valid), logits.options());
  }
  record("cross_entropy", out, {logits},
         [sl = SavedTensor(logits, "cross_entropy"), st = SavedTensor(t, "cross_entropy"), options, valid,
          valid_on_device, N, C](const Tensor& g) -> std::vector<Tensor> {
           const Tensor logits = sl.get(), targets = st.get();
           Tensor grad = empty(logits.shape(), logits.options());
           if (logits.device().is_cuda()) {
             cuda_kernels::cross_entropy_backward(logits, targets, g, options.label_smoothing, options.ignore_index,
                                              valid_on_device, grad);
             return {grad};
           }
           const double scale = g.item<double>() / double(valid);
           visit_floating(logits.dtype(), "cross_entropy", [&]<class T> {
             cross_entropy_backward<T>(logits.data_ptr<T>(), targets.data_ptr<int64_t>(), N, C, options, scale,
                                       grad.data_ptr<T>());
           });
           return {grad};
         });
  return out;
}

// ---- mse_loss -------------------------------------------------------------------------------------

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = amp::prepare(amp::Op::MseLoss, a_in, b_in);
  HG_CHECK(a.shape() == b.shape(), "mse_loss: input shape ", a.shape(), " and target shape ", b.shape(),
           " differ (mse_loss does not broadcast)");
  return mean(pow(a - b, 2.0));  // composed of differentiable ops: no kernel, no backward to write
}

}  // namespace hg
