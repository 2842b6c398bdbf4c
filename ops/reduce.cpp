// sum, mean, amax, argmax and sum_to: checks, autocast, the kernel (kernels/reduce.h) and the
// autograd node of each.
#include "ops/reduce.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/reduce.h"
#include "ops/compare.h"
#include "ops/elementwise.h"
#include "ops/shape.h"
#include "ops/record.h"

namespace hg {

using kernels::all_dims;
using kernels::ReduceKind;

namespace {

Tensor reduce_sum(amp::Op op_id, const Tensor& input, Shape dims, bool keepdim, bool mean) {
  const std::string_view op = amp::op_name(op_id);
  auto [x] = amp::prepare(op_id, input);
  HG_CHECK(!mean || is_floating(x.dtype()), "mean: expected a floating tensor, got ", x.dtype(),
           " (convert with .to(hg::f32) first)");
  const kernels::Reduction plan = kernels::plan_reduction(x, dims, op);
  Tensor out = kernels::reduce(mean ? ReduceKind::Mean : ReduceKind::Sum, plan, keepdim);
  const double scale = mean ? 1.0 / double(plan.R) : 1.0;
  record(op_id, out, {x},
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
  const kernels::Reduction plan = kernels::plan_reduction(x, {dim}, op);
  HG_CHECK(plan.R > 0, op, ": cannot reduce over dimension ", dim, " of size 0 in shape ", x.shape(),
           " (the maximum of nothing is undefined)");
  return kernels::reduce(want_index ? ReduceKind::ArgMax : ReduceKind::Max, plan, keepdim);
}
}  // namespace

Tensor amax(const Tensor& input, int dim, bool keepdim) {
  auto [x] = amp::prepare(amp::Op::Amax, input);
  Tensor out = run_max(x, dim, keepdim, false, "amax");
  dim = normalize_dim(dim, x.dim(), "amax");
  record(amp::Op::Amax, out, {x}, [sx = SavedTensor(x), sy = SavedTensor(out), dim, keepdim]
         (const Tensor& g) -> std::vector<Tensor> {
           const Tensor x = sx.get();
           const Tensor y = keepdim ? sy.get() : unsqueeze(sy.get(), dim);
           const Tensor gk = keepdim ? g : unsqueeze(g, dim);
           // Ties share the gradient equally (PyTorch's amax convention).
           const Tensor mask = eq(x, y);
           const Tensor grad = mask * (gk / sum(mask, {dim}, true));
           // A 0-d input was reduced as one element of a size-1 dim: the unsqueezes made it [1].
           return {x.dim() == 0 ? grad.reshape(x.shape()) : grad};
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
