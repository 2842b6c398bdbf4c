// Indexing and rearranging (ops/indexing.h). index_select, gather and scatter_add move whole
// rows with the embedding kernels (kernels/embedding.h, CPU and CUDA): index_select lays x out as
// a [size(dim), rest] table (dim moved to the front) and picks rows; gather and scatter_add see x
// as a [numel, 1] table and turn each index into the flat offset of the element it names. The
// indices are read on the host to check them (a GPU index tensor costs one copy), so that no
// kernel ever reads or writes outside a tensor. flip, roll, repeat and pad are compositions.
#include "ops/indexing.h"

#include <algorithm>
#include <cmath>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/embedding.h"
#include "ops/compare.h"
#include "ops/elementwise.h"
#include "ops/record.h"
#include "ops/shape.h"

namespace hg {

namespace {

// The index values, on the host, each checked to lie in [0, size).
std::vector<int64_t> checked_indices(std::string_view op, const Tensor& index, int64_t size, int dim) {
  HG_CHECK(index.defined(), op, ": expected a defined index tensor");
  HG_CHECK(index.dtype() == i64 || index.dtype() == i32, op, ": index must be i64 (or i32), got ", index.dtype());
  std::vector<int64_t> values = index.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    HG_CHECK(values[i] >= 0 && values[i] < size, op, ": index ", values[i], " at position ", i,
             " is out of range for dimension ", dim, " of size ", size);
  return values;
}

Tensor i64_tensor(const std::vector<int64_t>& values, Device device) {
  return from_vector(values, {int64_t(values.size())}).to(device);
}

// x (detached) with `dim` moved to the front, as the contiguous [size(dim), rest] table the
// embedding kernels take; `back` undoes it for a table of any number of rows.
struct RowLayout {
  Tensor table;
  Shape perm, moved_shape;

  RowLayout(const Tensor& x, int dim) {
    perm.push_back(dim);
    for (int d = 0; d < x.dim(); ++d)
      if (d != dim) perm.push_back(d);
    const Tensor moved = x.detach().permute(perm).contiguous();
    moved_shape = moved.shape();
    int64_t rest = 1;
    for (int d = 1; d < moved.dim(); ++d) rest *= moved_shape[d];
    table = moved.reshape({moved_shape[0], rest});
  }

  Tensor back(const Tensor& rows) const {
    Shape shape = moved_shape;
    shape[0] = rows.shape()[0];
    Shape inverse(perm.size(), 0);
    for (size_t i = 0; i < perm.size(); ++i) inverse[size_t(perm[i])] = int64_t(i);
    return rows.reshape(shape).permute(inverse).contiguous();
  }
};

// The flat offset (in x's row-major order) of the element each entry of `index` names along
// `dim`, for gather and scatter_add: index's coordinates elsewhere, the index value at dim.
Tensor flat_offsets(std::string_view op, const Tensor& index, const Shape& x_shape, int dim, Device device) {
  const std::vector<int64_t> values = checked_indices(op, index, x_shape[dim], dim);
  const Shape x_strides = contiguous_strides(x_shape);
  const Shape& shape = index.shape();
  std::vector<int64_t> offsets(values.size());
  std::vector<int64_t> coord(size_t(shape.ndim()), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < shape.ndim(); ++d) offset += (d == dim ? values[i] : coord[size_t(d)]) * x_strides[d];
    offsets[i] = offset;
    for (int d = shape.ndim() - 1; d >= 0; --d) {  // next coordinate, row-major
      if (++coord[size_t(d)] < shape[d]) break;
      coord[size_t(d)] = 0;
    }
  }
  return i64_tensor(offsets, device);
}

// gather and scatter_add: index has x's rank and fits inside x except along dim (and inside
// `src` everywhere, for scatter_add).
void check_index_shape(std::string_view op, const Tensor& x, const Tensor& index, int dim, const Tensor* src) {
  HG_CHECK(index.defined(), op, ": expected a defined index tensor");
  HG_CHECK(index.dim() == x.dim(), op, ": index must have as many dimensions as the input (", x.dim(),
           "), got shape ", index.shape());
  for (int d = 0; d < x.dim(); ++d) {
    HG_CHECK(d == dim || index.shape()[d] <= x.shape()[d], op, ": index shape ", index.shape(),
             " is larger than the input's ", x.shape(), " in dimension ", d);
    if (src)
      HG_CHECK(index.shape()[d] <= src->shape()[d], op, ": index shape ", index.shape(), " is larger than src's ",
               src->shape(), " in dimension ", d);
  }
}

// The elements of a [numel, 1] view of `from` at `offsets`, shaped `shape`.
Tensor take(const Tensor& from, const Tensor& offsets, const Shape& shape) {
  Tensor out = empty({offsets.numel(), 1}, from.options());
  kernels::embedding_forward(offsets, from.contiguous().reshape({from.numel(), 1}), out);
  return out.reshape(shape);
}

}  // namespace

Tensor index_select(const Tensor& x_in, int dim, const Tensor& index) {
  auto [x] = amp::prepare(amp::Op::IndexSelect, x_in);
  HG_CHECK(x.dim() >= 1, "index_select: expected a tensor with at least one dimension, got a 0-d tensor");
  const int d = normalize_dim(dim, x.dim(), "index_select");
  HG_CHECK(index.defined() && index.dim() <= 1, "index_select: index must be a 1-D tensor, got shape ",
           index.defined() ? index.shape() : Shape{});
  detail::check_same_device("index_select", x, index);
  const int64_t size = x.shape()[d];
  checked_indices("index_select", index, size, d);
  const Tensor idx = index.reshape({index.numel()}).to(i64).contiguous();
  const RowLayout layout(x, d);
  Tensor rows = empty({idx.numel(), layout.table.shape()[1]}, x.options());
  kernels::embedding_forward(idx, layout.table, rows);
  Tensor out = layout.back(rows);
  if (is_floating(x.dtype()))
    record(amp::Op::IndexSelect, out, {x}, [idx, d, size](const Tensor& g) -> std::vector<Tensor> {
      const RowLayout g_layout(g, d);  // g has out's shape
      Tensor grad = zeros({size, g_layout.table.shape()[1]}, g.options());
      kernels::embedding_backward(idx, g_layout.table, grad);  // repeated indices add up
      return {g_layout.back(grad)};
    });
  return out;
}

Tensor gather(const Tensor& x_in, int dim, const Tensor& index) {
  auto [x] = amp::prepare(amp::Op::Gather, x_in);
  HG_CHECK(x.dim() >= 1, "gather: expected a tensor with at least one dimension, got a 0-d tensor");
  const int d = normalize_dim(dim, x.dim(), "gather");
  check_index_shape("gather", x, index, d, nullptr);
  detail::check_same_device("gather", x, index);
  const Tensor offsets = flat_offsets("gather", index, x.shape(), d, x.device());
  Tensor out = take(x.detach(), offsets, index.shape());
  if (is_floating(x.dtype()))
    record(amp::Op::Gather, out, {x}, [offsets, x_shape = x.shape()](const Tensor& g) -> std::vector<Tensor> {
      Tensor grad = zeros({checked_numel(x_shape, "gather"), 1}, g.options());
      kernels::embedding_backward(offsets, g.contiguous().reshape({g.numel(), 1}), grad);  // repeats add up
      return {grad.reshape(x_shape)};
    });
  return out;
}

Tensor scatter_add(const Tensor& x_in, int dim, const Tensor& index, const Tensor& src_in) {
  HG_CHECK(x_in.defined() && src_in.defined(), "scatter_add: expected defined tensors for the input and src");
  auto [x0, src0] = amp::prepare(amp::Op::ScatterAdd, x_in, src_in);
  const DType dtype = promote_types(x0.dtype(), src0.dtype());
  HG_CHECK(is_floating(dtype), "scatter_add: expected floating tensors, got ", x0.dtype(), " and ", src0.dtype());
  const Tensor x = x0.to(dtype), src = src0.to(dtype);
  HG_CHECK(x.dim() >= 1, "scatter_add: expected a tensor with at least one dimension, got a 0-d tensor");
  const int d = normalize_dim(dim, x.dim(), "scatter_add");
  HG_CHECK(src.dim() == x.dim(), "scatter_add: src must have as many dimensions as the input (", x.dim(),
           "), got shape ", src.shape());
  check_index_shape("scatter_add", x, index, d, &src);
  detail::check_same_device("scatter_add", x, index);
  detail::check_same_device("scatter_add", x, src);
  // Only src's leading index.shape() block is read (PyTorch's rule): narrowed views, so src's
  // gradient is 0 outside it.
  Tensor used = src;
  for (int k = 0; k < src.dim(); ++k)
    if (used.shape()[k] != index.shape()[k]) used = narrow(used, k, 0, index.shape()[k]);
  const Tensor offsets = flat_offsets("scatter_add", index, x.shape(), d, x.device());
  Tensor out = x.detach().clone();
  kernels::embedding_backward(offsets, used.detach().contiguous().reshape({used.numel(), 1}),
                              out.reshape({out.numel(), 1}));
  record(amp::Op::ScatterAdd, out, {x, used}, [offsets, index_shape = index.shape()](const Tensor& g) {
    return std::vector<Tensor>{g, take(g, offsets, index_shape)};
  });
  return out;
}

Tensor flip(const Tensor& x_in, Shape dims) {
  auto [x] = amp::prepare(amp::Op::Flip, x_in);
  std::vector<bool> seen(size_t(std::max(x.dim(), 1)), false);
  Tensor out = x;
  for (int64_t dim : dims) {
    const int d = normalize_dim(dim, x.dim(), "flip");
    HG_CHECK(!seen[size_t(d)], "flip: dim ", d, " appears multiple times in the list of dims");
    seen[size_t(d)] = true;
    const int64_t n = x.shape()[d];
    std::vector<int64_t> reversed(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) reversed[size_t(i)] = n - 1 - i;
    out = index_select(out, d, i64_tensor(reversed, x.device()));
  }
  return dims.empty() ? x.clone() : out;
}

Tensor roll(const Tensor& x_in, int64_t shift, int dim) {
  auto [x] = amp::prepare(amp::Op::Roll, x_in);
  HG_CHECK(x.dim() >= 1, "roll: expected a tensor with at least one dimension, got a 0-d tensor");
  const int d = normalize_dim(dim, x.dim(), "roll");
  const int64_t n = x.shape()[d];
  const int64_t s = n == 0 ? 0 : ((shift % n) + n) % n;  // the wrapped-around part's length
  if (s == 0) return x.clone();
  return cat({narrow(x, d, n - s, s), narrow(x, d, 0, n - s)}, d);
}

Tensor repeat(const Tensor& x_in, Shape repeats) {
  auto [x] = amp::prepare(amp::Op::Repeat, x_in);
  HG_CHECK(repeats.ndim() >= x.dim(), "repeat: the number of repeats (", repeats.ndim(),
           ") cannot be smaller than the number of dimensions of the tensor (", x.dim(), ")");
  const int lead = repeats.ndim() - x.dim();
  // [s0, s1] repeated [r0, r1]: view as [1, s0, 1, s1], expand to [r0, s0, r1, s1], then merge
  // each pair -- copy k of every dim is laid out before copy k + 1, as PyTorch tiles.
  Shape paired, expanded, merged;
  for (int i = 0; i < repeats.ndim(); ++i) {
    HG_CHECK(repeats[i] >= 0, "repeat: repeats must be non-negative, got ", repeats);
    const int64_t size = i < lead ? 1 : x.shape()[i - lead];
    paired.push_back(1), paired.push_back(size);
    expanded.push_back(repeats[i]), expanded.push_back(size);
    merged.push_back(repeats[i] * size);
  }
  return expand(x.reshape(paired), expanded).contiguous().reshape(merged);
}

Tensor pad(const Tensor& x_in, std::vector<int64_t> pads, PadOptions options) {
  auto [x] = amp::prepare(amp::Op::Pad, x_in);
  const std::string& mode = options.mode;
  HG_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate",
           "pad: mode must be \"constant\", \"reflect\" or \"replicate\", got \"", mode, "\"");
  HG_CHECK(pads.size() % 2 == 0, "pad: pads must come in pairs (left, right), got ", pads.size(), " values");
  HG_CHECK(int64_t(pads.size()) <= 2 * x.dim(), "pad: ", pads.size() / 2, " pairs of pads for a ", x.dim(),
           "-d tensor of shape ", x.shape());
  HG_CHECK(is_floating(x.dtype()) || mode != "constant" || options.value == std::trunc(options.value), "pad: value ",
           options.value, " cannot be held by a ", x.dtype(), " tensor");
  Tensor out = x;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int d = x.dim() - 1 - int(k);
    int64_t left = pads[2 * k], right = pads[2 * k + 1];
    const int64_t n = out.shape()[d];
    HG_CHECK(n + left + right >= 0, "pad: pads (", left, ", ", right, ") leave dimension ", d, " of size ", n,
             " with a negative size");
    if (mode == "constant") {
      if (left < 0) out = narrow(out, d, -left, n + left), left = 0;  // a negative pad crops
      if (right < 0) out = narrow(out, d, 0, out.shape()[d] + right), right = 0;
      std::vector<Tensor> parts;
      Shape side = out.shape();
      if (left > 0) side[d] = left, parts.push_back(full(side, options.value, out.options()));
      parts.push_back(out);
      if (right > 0) side[d] = right, parts.push_back(full(side, options.value, out.options()));
      if (parts.size() > 1) out = cat(parts, d);
      continue;
    }
    HG_CHECK(left >= 0 && right >= 0, "pad: ", mode, " padding must be non-negative, got (", left, ", ", right,
             ") for dimension ", d);
    if (mode == "reflect")
      HG_CHECK(left < n && right < n, "pad: reflect padding (", left, ", ", right,
               ") must be smaller than the size ", n, " of dimension ", d);
    else
      HG_CHECK(n > 0, "pad: replicate padding needs a non-empty dimension ", d);
    std::vector<int64_t> source;  // which input position each output position copies
    for (int64_t j = -left; j < n + right; ++j) {
      if (mode == "reflect") source.push_back(j < 0 ? -j : j >= n ? 2 * (n - 1) - j : j);
      else source.push_back(std::clamp<int64_t>(j, 0, n - 1));
    }
    out = index_select(out, d, i64_tensor(source, x.device()));
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  HG_CHECK(index.defined(), "one_hot: expected a defined index tensor");
  HG_CHECK(index.dtype() == i64 || index.dtype() == i32, "one_hot: index must be i64 (or i32), got ", index.dtype());
  const std::vector<int64_t> values = index.to_vector<int64_t>();
  int64_t largest = -1;
  for (int64_t v : values) {
    HG_CHECK(v >= 0, "one_hot: class values must be non-negative, got ", v);
    largest = std::max(largest, v);
  }
  if (num_classes == -1) {
    HG_CHECK(!values.empty(), "one_hot: cannot infer the number of classes from an empty tensor");
    num_classes = largest + 1;
  }
  HG_CHECK(num_classes >= 1 && largest < num_classes, "one_hot: class value ", largest,
           " is out of range for num_classes = ", num_classes);
  const Tensor classes = arange(num_classes, {.dtype = i64, .device = index.device()});
  return eq(unsqueeze(index.detach(), -1), classes).to(i64);
}

}  // namespace hg
