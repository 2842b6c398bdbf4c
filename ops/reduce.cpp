// sum, mean, amax, argmax and sum_to. Every reduction is brought to one shape, a contiguous
// (outer, reduce, inner) block: reduced dimensions that are not adjacent are permuted to the end
// first (a copy). Then:
//   inner == 1  -> each output is a sum over a contiguous row;
//   inner  > 1  -> rows of `inner` values are accumulated into `inner` outputs (vectorised).
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "kernels/math/reduce.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"
#include "ops/elementwise_kernel.h"
#include "ops/shape.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;
using cuda_ops::ReduceKind;

namespace {

// ---- the accumulation rules -------------------------------------------------------------------

template <class T> using SumAcc = std::conditional_t<is_floating_type_v<T>, double, int64_t>;

template <class A>
inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

constexpr int64_t kFullReduceChunk = 65536;  // fixed: the split must not depend on thread count

// ---- CPU kernels ------------------------------------------------------------------------------

// Sum (or mean) of x (outer, R, inner) into out (outer, inner), out's type U.
template <class T, class U>
void sum_kernel(const T* x, U* out, int64_t outer, int64_t R, int64_t inner, bool mean) {
  using S = SumAcc<T>;
  const auto finish = [&](S total) {
    if (mean) return U(Acc<U>(double(total) / double(R)));
    return U(Acc<U>(total));
  };
  const auto row_sum = [&](const T* row, int64_t n) {
    if constexpr (is_floating_type_v<T>) {
      return detail::sum_as_double(row, n);
    } else {  // integers: exact in int64
      S total = 0;
      for (int64_t i = 0; i < n; ++i) total += S(row[i]);
      return total;
    }
  };
  if (inner == 1 && outer == 1) {
    const int64_t chunks = std::max<int64_t>(1, (R + kFullReduceChunk - 1) / kFullReduceChunk);
    std::vector<S> partial(size_t(chunks), S(0));
    parallel_chunks(R, kFullReduceChunk, [&](int64_t c, int64_t lo, int64_t hi) { partial[c] = row_sum(x + lo, hi - lo); });
    out[0] = finish(std::accumulate(partial.begin(), partial.end(), S(0)));
  } else if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(R, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t o = lo; o < hi; ++o) out[o] = finish(row_sum(x + o * R, R));
                 });
  } else {
    parallel_for(0, outer, grain_for(R * inner), [&](int64_t lo, int64_t hi) {
      std::vector<S> acc(static_cast<size_t>(inner));
      for (int64_t o = lo; o < hi; ++o) {
        std::fill(acc.begin(), acc.end(), S(0));
        for (int64_t r = 0; r < R; ++r) {
          const T* row = x + (o * R + r) * inner;
          for (int64_t i = 0; i < inner; ++i) acc[i] += S(Acc<T>(row[i]));
        }
        for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = finish(acc[i]);
      }
    });
  }
}

// Max (values) or argmax (first index of the maximum) over R.
template <class T>
void max_kernel(const T* x, T* values, int64_t* indices, int64_t outer, int64_t R, int64_t inner) {
  using A = Acc<T>;
  parallel_for(0, outer * inner, std::max<int64_t>(1, detail::kElementwiseGrain / std::max<int64_t>(R, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t k = lo; k < hi; ++k) {
                   const int64_t o = k / inner, i = k % inner;
                   const T* p = x + o * R * inner + i;
                   A best = A(p[0]);
                   int64_t best_index = 0;
                   for (int64_t r = 1; r < R && !is_nan(best); ++r) {  // (nothing beats a NaN)
                     const A v = A(p[r * inner]);
                     if (math::max_beats(v, r, best, best_index)) best = v, best_index = r;
                   }
                   if (values) values[k] = T(best);
                   if (indices) indices[k] = best_index;
                 }
               });
}

// ---- the shared plumbing: normalise dims, permute, run the kernel -----------------------------

struct Plan {
  Tensor x;  // contiguous, laid out as (outer, R, inner)
  int64_t outer = 1, R = 1, inner = 1;
  Shape out_shape;      // without the reduced dims
  Shape keepdim_shape;  // reduced dims as 1
};

Plan plan_reduction(const Tensor& x, Shape dims, std::string_view op) {
  std::vector<bool> reduced(size_t(x.dim()), false);
  for (int64_t d : dims) {
    const int nd = normalize_dim(d, x.dim(), op);
    HG_CHECK(x.dim() == 0 || !reduced[nd], op, ": dimension ", d, " appears more than once in ", dims);
    if (x.dim() > 0) reduced[nd] = true;
  }
  Plan plan;
  int first = x.dim(), last = -1;
  for (int d = 0; d < x.dim(); ++d) {
    if (reduced[d]) {
      first = std::min(first, d);
      last = d;
      plan.keepdim_shape.push_back(1);
    } else {
      plan.out_shape.push_back(x.shape()[d]);
      plan.keepdim_shape.push_back(x.shape()[d]);
    }
  }
  bool adjacent = true;
  for (int d = first; d <= last; ++d) adjacent = adjacent && reduced[d];
  if (adjacent) {
    plan.x = x.contiguous();
    for (int d = 0; d < x.dim(); ++d) (d < first ? plan.outer : d <= last ? plan.R : plan.inner) *= x.shape()[d];
  } else {
    Shape perm;
    for (int d = 0; d < x.dim(); ++d) if (!reduced[d]) perm.push_back(d);
    for (int d = 0; d < x.dim(); ++d) if (reduced[d]) perm.push_back(d);
    plan.x = x.detach().permute(perm).contiguous();
    for (int d = 0; d < x.dim(); ++d) (reduced[d] ? plan.R : plan.outer) *= x.shape()[d];
  }
  return plan;
}

Shape all_dims(const Tensor& x) {
  Shape dims(static_cast<size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

Tensor run_sum(const Plan& plan, DType dtype, Device device, bool keepdim, bool mean) {
  const DType out_dtype = is_floating(dtype) ? dtype : accumulate_dtype(dtype);  // integer sums are i64
  Tensor out = empty(keepdim ? plan.keepdim_shape : plan.out_shape, {.dtype = out_dtype, .device = device});
  if (out.numel() == 0) return out;
  if (device.is_cuda()) {
    cuda_ops::reduce(mean ? ReduceKind::Mean : ReduceKind::Sum, plan.x, out, plan.outer, plan.R, plan.inner);
    return out;
  }
  visit_dtype(dtype, [&]<class T> {
    visit_dtype(out_dtype, [&]<class U> {
      sum_kernel<T, U>(plan.x.data_ptr<T>(), out.data_ptr<U>(), plan.outer, plan.R, plan.inner, mean);
    });
  });
  return out;
}

Tensor reduce_sum(amp::Op op_id, const Tensor& input, Shape dims, bool keepdim, bool mean) {
  const std::string_view op = amp::op_name(op_id);
  auto [x] = amp::prepare(op_id, input);
  HG_CHECK(!mean || is_floating(x.dtype()), "mean: expected a floating tensor, got ", x.dtype(),
           " (convert with .to(hg::f32) first)");
  const Plan plan = plan_reduction(x, std::move(dims), op);
  Tensor out = run_sum(plan, x.dtype(), x.device(), keepdim, mean);
  const double scale = mean ? 1.0 / double(plan.R) : 1.0;
  record(std::string(op), out, {x},
         [shape = x.shape(), keep = plan.keepdim_shape, scale](const Tensor& g) -> std::vector<Tensor> {
           const Tensor spread = expand(g.reshape(keep), shape);
           return {scale == 1.0 ? spread : spread * scale};
         });
  return out;
}

}  // namespace

// ---- sum / mean --------------------------------------------------------------------------------

Tensor sum(const Tensor& x) { return reduce_sum(amp::Op::Sum, x, all_dims(x), false, false); }
Tensor sum(const Tensor& x, Shape dims, bool keepdim) { return reduce_sum(amp::Op::Sum, x, std::move(dims), keepdim, false); }
Tensor mean(const Tensor& x) { return reduce_sum(amp::Op::Mean, x, all_dims(x), false, true); }
Tensor mean(const Tensor& x, Shape dims, bool keepdim) { return reduce_sum(amp::Op::Mean, x, std::move(dims), keepdim, true); }

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.dim() - shape.ndim();
  HG_CHECK(lead >= 0, "sum_to: cannot reduce shape ", g.shape(), " to ", shape);
  Shape dims;
  for (int d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  return sum(g, dims, true).reshape(shape);
}

// ---- amax / argmax -----------------------------------------------------------------------------

namespace {
Tensor run_max(const Tensor& x, int dim, bool keepdim, bool want_index, std::string_view op) {
  const Plan plan = plan_reduction(x, {dim}, op);
  HG_CHECK(plan.R > 0, op, ": cannot reduce over dimension ", dim, " of size 0 in shape ", x.shape(),
           " (the maximum of nothing is undefined)");
  Tensor out = empty(keepdim ? plan.keepdim_shape : plan.out_shape,
                     {.dtype = want_index ? i64 : x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  if (x.device().is_cuda()) {
    cuda_ops::reduce(want_index ? ReduceKind::ArgMax : ReduceKind::Max, plan.x, out, plan.outer, plan.R, plan.inner);
    return out;
  }
  visit_dtype(x.dtype(), [&]<class T> {
    max_kernel<T>(plan.x.data_ptr<T>(), want_index ? nullptr : out.data_ptr<T>(),
                  want_index ? out.data_ptr<int64_t>() : nullptr, plan.outer, plan.R, plan.inner);
  });
  return out;
}
}  // namespace

Tensor amax(const Tensor& input, int dim, bool keepdim) {
  auto [x] = amp::prepare(amp::Op::Amax, input);
  Tensor out = run_max(x, dim, keepdim, false, "amax");
  dim = normalize_dim(dim, x.dim(), "amax");
  record("amax", out, {x}, [sx = SavedTensor(x, "amax"), sy = SavedTensor(out, "amax"), dim, keepdim]
         (const Tensor& g) -> std::vector<Tensor> {
           const Tensor x = sx.get();
           const Tensor y = keepdim ? sy.get() : unsqueeze(sy.get(), dim);
           const Tensor gk = keepdim ? g : unsqueeze(g, dim);
           // Ties share the gradient equally (PyTorch's amax convention).
           const Tensor mask = eq(x, y);
           return {mask * (gk / sum(mask, {dim}, true))};
         });
  return out;
}

// Not differentiable; it goes through prepare (policy Keep) so that a PrecisionReport lists it,
// with the i64 output its op-table row gives.
Tensor argmax(const Tensor& input, int dim) {
  auto [x] = amp::prepare(amp::Op::Argmax, input.detach());
  return run_max(x, dim, false, true, "argmax");
}

}  // namespace hg
