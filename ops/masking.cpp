// masked_fill, tril, triu: one helper, fill_where, that puts a value where a mask is set and
// records the backward that lets the gradient through everywhere else.
#include "ops/masking.h"

#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/record.h"

namespace hg {

namespace {

using kernels::map_to_new;

// `value` where `replaced` (in x's dtype, 0 or not) is nonzero, else x; the op `op` records g
// where x was kept, summed back to x's shape.
Tensor fill_where(amp::Op op, const Tensor& x, const Tensor& replaced, double value) {
  const Shape shape = broadcast_shapes(x.shape(), replaced.shape(), amp::op_name(op));
  const Tensor fill = full({}, value, x.options());
  Tensor out = map_to_new<3>(shape, {replaced, fill, x}, kernels::math::Select{});
  record(op, out, {x}, [sr = SavedTensor(replaced), sx = x.shape(), shape](const Tensor& g) {
    const Tensor none = zeros({}, g.options());
    return std::vector<Tensor>{sum_to(map_to_new<3>(shape, {sr.get(), none, g}, kernels::math::Select{}), sx)};
  });
  return out;
}

// The mask of what tril (lower = true) or triu drops from the last two dims, as a [rows, cols]
// tensor of x's dtype on x's device: small, so it is made on the host.
Tensor triangle_dropped(const Tensor& x, int64_t diagonal, bool lower) {
  const std::string_view name = lower ? "tril" : "triu";
  HG_CHECK(x.dim() >= 2, name, ": expected a tensor with at least 2 dimensions, got shape ", x.shape());
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  std::vector<double> dropped(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dropped[size_t(i * cols + j)] = lower ? (j - i > diagonal) : (j - i < diagonal);
  return from_vector(dropped, {rows, cols}).to(x.dtype()).to(x.device());
}

}  // namespace

Tensor masked_fill(const Tensor& x_in, const Tensor& mask, double value) {
  auto [x] = amp::prepare(amp::Op::MaskedFill, x_in);
  HG_CHECK(x.defined() && mask.defined(), "masked_fill: expected defined tensors");
  detail::check_same_device("masked_fill", x, mask);
  HG_CHECK(!is_floating(mask.dtype()), "masked_fill: expected an integer mask (u8, nonzero = true), got ",
           mask.dtype(), "; compare with lt/gt/eq or convert with .to(hg::u8)");
  HG_CHECK(is_floating(x.dtype()) || value == std::trunc(value), "masked_fill: value ", value,
           " cannot be stored in a tensor of dtype ", x.dtype());
  return fill_where(amp::Op::MaskedFill, x, mask.detach().to(x.dtype()), value);
}

Tensor tril(const Tensor& x_in, int64_t diagonal) {
  auto [x] = amp::prepare(amp::Op::Tril, x_in);
  return fill_where(amp::Op::Tril, x, triangle_dropped(x, diagonal, true), 0.0);
}

Tensor triu(const Tensor& x_in, int64_t diagonal) {
  auto [x] = amp::prepare(amp::Op::Triu, x_in);
  return fill_where(amp::Op::Triu, x, triangle_dropped(x, diagonal, false), 0.0);
}

}  // namespace hg
