// Sorting and selecting (ops/sort.h): the order is computed on the host from an f64 copy of the
// values (every dtype's values are exact in f64), the values are gathered from the input with
// gather(), whose backward sends each gradient to its source.
#include "ops/sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "amp/autocast.h"
#include "amp/op.h"
#include "ops/elementwise.h"
#include "ops/indexing.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg {

namespace {

// The stable order of each row along `dim` (NaN above +inf, as PyTorch's), as i64 indices of x's
// shape on x's device; `keep` rows-lengths of it (topk).
Tensor order_along(const Tensor& x, int dim, bool descending, int64_t keep) {
  Shape perm;  // dim moved last, so each row is contiguous
  for (int d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  const Tensor rows = x.detach().permute(perm).contiguous();
  const std::vector<double> values = rows.to_vector<double>();
  const int64_t n = x.shape()[dim], count = n == 0 ? 0 : int64_t(values.size()) / n;
  // a before b: ascending with NaN last, descending with NaN first.
  const auto before = [descending](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return descending ? std::isnan(a) && !std::isnan(b) : !std::isnan(a) && std::isnan(b);
    return descending ? a > b : a < b;
  };
  std::vector<int64_t> order(size_t(count * keep)), row(static_cast<size_t>(n));
  for (int64_t r = 0; r < count; ++r) {
    const double* v = values.data() + r * n;
    std::iota(row.begin(), row.end(), int64_t(0));
    std::stable_sort(row.begin(), row.end(), [&](int64_t i, int64_t j) { return before(v[i], v[j]); });
    std::copy(row.begin(), row.begin() + keep, order.begin() + r * keep);
  }
  Shape moved = rows.shape();
  moved[moved.ndim() - 1] = keep;
  Shape inverse(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) inverse[size_t(perm[i])] = int64_t(i);
  return from_vector(order, moved).permute(inverse).contiguous().to(x.device());
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x_in, int dim, bool descending) {
  HG_CHECK(x_in.defined(), "sort: expected a defined tensor");
  auto [x] = amp::prepare(amp::Op::Sort, x_in);
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = i64, .device = x.device()})};
  const int d = normalize_dim(dim, x.dim(), "sort");
  const Tensor indices = order_along(x, d, descending, x.shape()[d]);
  return {gather(x, d, indices), indices};
}

std::tuple<Tensor, Tensor> topk(const Tensor& x_in, int64_t k, int dim, bool largest) {
  HG_CHECK(x_in.defined(), "topk: expected a defined tensor");
  auto [x] = amp::prepare(amp::Op::Topk, x_in);
  const int d = x.dim() == 0 ? 0 : normalize_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[d];
  HG_CHECK(k >= 0 && k <= n, "topk: k (", k, ") is out of range for dimension ", d, " of size ", n);
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = i64, .device = x.device()})};
  const Tensor indices = order_along(x, d, largest, k);
  return {gather(x, d, indices), indices};
}

namespace {

// max / min with a dim: the index of the first extremum (argmax / argmin), and the value gathered
// there, so the gradient goes to that one position.
std::tuple<Tensor, Tensor> extremum(amp::Op op, const Tensor& x_in, int dim, bool keepdim,
                                    Tensor (*index_of)(const Tensor&, int)) {
  const std::string_view name = amp::op_name(op);
  HG_CHECK(x_in.defined(), name, ": expected a defined tensor");
  auto [x] = amp::prepare(op, x_in);
  const int d = normalize_dim(dim, std::max(x.dim(), 1), name);
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = i64, .device = x.device()})};
  const Tensor index = index_of(x, d);
  const Tensor values = gather(x, d, unsqueeze(index, d));
  return keepdim ? std::tuple{values, unsqueeze(index, d)} : std::tuple{squeeze(values, d), index};
}

}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, int dim, bool keepdim) {
  return extremum(amp::Op::Max, x, dim, keepdim, argmax);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int dim, bool keepdim) {
  return extremum(amp::Op::Min, x, dim, keepdim, argmin);
}

Tensor argmin(const Tensor& x_in, int dim) {
  HG_CHECK(x_in.defined(), "argmin: expected a defined tensor");
  auto [x] = amp::prepare(amp::Op::Argmin, x_in.detach());
  // The first maximum of -x is the first minimum of x (NaN stays NaN and wins, as in argmax);
  // unsigned values are negated in i64.
  return argmax(neg(x.dtype() == u8 ? x.to(i64) : x), dim);
}

Tensor amin(const Tensor& x_in, int dim, bool keepdim) {
  HG_CHECK(x_in.defined(), "amin: expected a defined tensor");
  auto [x] = amp::prepare(amp::Op::Amin, x_in);
  HG_CHECK(x.dtype() != u8, "amin: u8 tensors are not supported (convert with .to(hg::i64) first)");
  return neg(amax(neg(x), dim, keepdim));
}

}  // namespace hg
