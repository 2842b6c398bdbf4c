// The reduction kernels (kernels/reduce.h): the CPU loops, and the dispatch to the CUDA ones.
#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/copy.h"
#include "core/parallel.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/reduce.h"

namespace hg::kernels {

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
      return kernels::sum_as_double(row, n);
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

// x's values in a contiguous tensor: x itself (as a plain handle) when it already is one.
Tensor contiguous_values(const Tensor& x) {
  if (x.is_contiguous()) return detail::alias(x, x.shape(), x.strides(), x.storage_offset());
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  detail::copy_into(out, x);
  return out;
}

}  // namespace

Reduction plan_reduction(const Tensor& x, const Shape& dims, std::string_view op) {
  std::vector<bool> reduced(size_t(x.dim()), false);
  for (int64_t d : dims) {
    const int nd = normalize_dim(d, x.dim(), op);
    HG_CHECK(x.dim() == 0 || !reduced[nd], op, ": dimension ", d, " appears more than once in ", dims);
    if (x.dim() > 0) reduced[nd] = true;
  }
  Reduction plan;
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
    plan.x = contiguous_values(x);
    for (int d = 0; d < x.dim(); ++d) (d < first ? plan.outer : d <= last ? plan.R : plan.inner) *= x.shape()[d];
  } else {
    Shape shape, strides;  // the kept dimensions first, then the reduced ones
    for (const bool want_reduced : {false, true})
      for (int d = 0; d < x.dim(); ++d)
        if (reduced[d] == want_reduced) shape.push_back(x.shape()[d]), strides.push_back(x.strides()[d]);
    plan.x = contiguous_values(detail::alias(x, shape, strides, x.storage_offset()));
    for (int d = 0; d < x.dim(); ++d) (reduced[d] ? plan.R : plan.outer) *= x.shape()[d];
  }
  return plan;
}

Shape all_dims(const Tensor& x) {
  Shape dims(static_cast<size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

Tensor reduce(ReduceKind kind, const Reduction& plan, bool keepdim) {
  const DType dtype = plan.x.dtype();
  const bool is_max = kind == ReduceKind::Max || kind == ReduceKind::ArgMax;
  const DType out_dtype = kind == ReduceKind::ArgMax ? i64
                          : is_max || is_floating(dtype) ? dtype
                                                         : accumulate_dtype(dtype);  // integer sums are i64
  Tensor out = empty(keepdim ? plan.keepdim_shape : plan.out_shape, {.dtype = out_dtype, .device = plan.x.device()});
  if (out.numel() == 0) return out;
  if (plan.x.device().is_cuda()) {
    kernels::cuda::reduce(kind, plan.x, out, plan.outer, plan.R, plan.inner);
  } else if (is_max) {
    const bool want_index = kind == ReduceKind::ArgMax;
    visit_dtype(dtype, [&]<class T> {
      max_kernel<T>(plan.x.data_ptr<T>(), want_index ? nullptr : out.data_ptr<T>(),
                    want_index ? out.data_ptr<int64_t>() : nullptr, plan.outer, plan.R, plan.inner);
    });
  } else {
    visit_dtype(dtype, [&]<class T> {
      visit_dtype(out_dtype, [&]<class U> {
        sum_kernel<T, U>(plan.x.data_ptr<T>(), out.data_ptr<U>(), plan.outer, plan.R, plan.inner,
                         kind == ReduceKind::Mean);
      });
    });
  }
  return out;
}

bool has_nan(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return false;
  // The maximum propagates NaN: it is NaN exactly when some element is.
  const Tensor flat = contiguous_values(t);
  const Reduction plan{detail::alias(flat, {flat.numel()}, {1}, flat.storage_offset()), 1, flat.numel(), 1, {}, {1}};
  const Tensor max = reduce(ReduceKind::Max, plan, false);
  return std::isnan(max.item<double>());
}

}  // namespace hg::kernels
