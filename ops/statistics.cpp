// Reductions made of other ops (ops/statistics.h). Each: amp::prepare with its own row (so the
// policy table and PrecisionReport name it), 16-bit inputs widened to f32, the composition, one
// rounding back to the input's dtype.
#include "ops/statistics.h"

#include <cmath>
#include <limits>

#include "amp/autocast.h"
#include "amp/op.h"
#include "ops/compare.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg {

namespace {

// The dtype the composition computes in: f32 for 16-bit inputs (one rounding at the end).
Tensor widened(const Tensor& x) { return x.dtype() == f16 || x.dtype() == bf16 ? x.to(f32) : x; }

Shape normalized_dims(const Tensor& x, const Shape& dims, std::string_view op) {
  Shape out;
  if (dims.ndim() == 0) {
    for (int d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    const int k = normalize_dim(d, x.dim(), op);
    for (int64_t seen : out) HG_CHECK(seen != k, op, ": dim ", k, " appears multiple times in the list of dims");
    out.push_back(k);
  }
  return out;
}

// Drops the reduced (size-1) dims of a keepdim result, highest first.
Tensor squeezed(Tensor y, Shape dims) {
  std::sort(dims.begin(), dims.end());
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) y = squeeze(y, int(*it));
  return y;
}

int64_t count_over(const Tensor& x, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[d];
  return n;
}

// amax over several dims, keeping them.
Tensor amax_over(Tensor y, const Shape& dims) {
  for (int64_t d : dims) y = amax(y, int(d), true);
  return y;
}

void check_floating(std::string_view op, const Tensor& x) {
  HG_CHECK(x.defined(), op, ": expected a defined tensor");
  HG_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype(),
           " (convert with .to(hg::f32) first)");
}

}  // namespace

Tensor prod(const Tensor& x) { return prod(x.reshape({x.numel()}), 0); }

Tensor prod(const Tensor& x_in, int dim, bool keepdim) {
  check_floating("prod", x_in);
  auto [x] = amp::prepare(amp::Op::Prod, x_in);
  if (x.dim() == 0) return x.clone();
  const int d = normalize_dim(dim, x.dim(), "prod");
  Tensor y = widened(x);
  if (y.shape()[d] == 0) {
    Shape shape = y.shape();
    shape[d] = 1;
    y = full(shape, 1.0, y.options());
  }
  // Pairwise: the first half times the second, an odd last slice carried along. Each step is a
  // mul, so a zero factor gets the product of the others as its gradient (no division by it).
  while (y.shape()[d] > 1) {
    const int64_t n = y.shape()[d], half = n / 2;
    Tensor p = narrow(y, d, 0, half) * narrow(y, d, half, half);
    if (n % 2) p = cat({p, narrow(y, d, 2 * half, 1)}, d);
    y = p;
  }
  if (!keepdim) y = squeeze(y, d);
  return y.to(x.dtype());
}

Tensor var(const Tensor& x_in, Shape dims, VarOptions options) {
  check_floating("var", x_in);
  auto [x] = amp::prepare(amp::Op::Var, x_in);
  const Shape over = normalized_dims(x, dims, "var");
  const Tensor xf = widened(x);
  const Tensor centred = xf - mean(xf, over, true);
  // N - correction <= 0 divides by 0 (inf or NaN), as PyTorch does.
  Tensor v = sum(centred * centred, over, true) / std::max(0.0, double(count_over(x, over)) - options.correction);
  if (!options.keepdim) v = squeezed(v, over);
  return v.to(x.dtype());
}

Tensor std(const Tensor& x_in, Shape dims, VarOptions options) {
  check_floating("std", x_in);
  auto [x] = amp::prepare(amp::Op::Std, x_in);
  return sqrt(var(widened(x), std::move(dims), options)).to(x.dtype());
}

Tensor logsumexp(const Tensor& x_in, Shape dims, bool keepdim) {
  check_floating("logsumexp", x_in);
  auto [x] = amp::prepare(amp::Op::Logsumexp, x_in);
  const Shape over = normalized_dims(x, dims, "logsumexp");
  const Tensor xf = widened(x);
  if (xf.numel() == 0) {  // an empty sum: log 0 = -inf
    Tensor s = log(sum(xf, over, true));
    return (keepdim ? s : squeezed(s, over)).to(x.dtype());
  }
  // Shifted by the (constant) max so exp cannot overflow; a row that is all -inf (or has +inf)
  // shifts by 0 instead, so it gives -inf (or +inf), not inf - inf = NaN.
  const Tensor m = amax_over(xf.detach(), over);
  const Tensor shift = where(isinf(m), zeros({}, m.options()), m);
  Tensor y = log(sum(exp(xf - shift), over, true)) + shift;
  if (!keepdim) y = squeezed(y, over);
  return y.to(x.dtype());
}

Tensor norm(const Tensor& x_in, double p, Shape dims, bool keepdim) {
  check_floating("norm", x_in);
  auto [x] = amp::prepare(amp::Op::Norm, x_in);
  const Shape over = normalized_dims(x, dims, "norm");
  const Tensor xf = widened(x);
  const Tensor a = abs(xf);
  Tensor y;
  if (std::isinf(p)) {
    y = p > 0 ? amax_over(a, over) : neg(amax_over(neg(a), over));
  } else if (p == 0) {
    y = sum(ne(xf, zeros({}, xf.options())).to(xf.dtype()), over, true);  // a count: no gradient
  } else if (p == 1) {
    y = sum(a, over, true);
  } else {
    // (sum |x|^p)^(1/p) with the gradient at a zero norm set to 0 (PyTorch's): the root is taken
    // of 1 where the sum is 0, and the result masked, so no inf * 0 reaches the inputs.
    const Tensor s = sum(p == 2 ? xf * xf : pow(a, p), over, true);
    const Tensor zero = eq(s, zeros({}, s.options()));  // (NaN is not zero: it propagates)
    const Tensor root = pow(where(zero, ones({}, s.options()), s), 1.0 / p);
    y = where(zero, zeros({}, s.options()), root);
  }
  if (!keepdim) y = squeezed(y, over);
  return y.to(x.dtype());
}

Tensor cumsum(const Tensor& x_in, int dim) {
  check_floating("cumsum", x_in);
  auto [x] = amp::prepare(amp::Op::Cumsum, x_in);
  if (x.dim() == 0) return x.clone();
  const int d = normalize_dim(dim, x.dim(), "cumsum");
  const int64_t n = x.shape()[d];
  Tensor y = widened(x);
  // Hillis-Steele: after the step with stride s, y[i] holds the sum of the 2s values ending at i.
  for (int64_t s = 1; s < n; s *= 2) {
    Shape lead = y.shape();
    lead[d] = s;
    y = y + cat({zeros(lead, y.options()), narrow(y, d, 0, n - s)}, d);
  }
  return y.to(x.dtype());
}

}  // namespace hg
