// Views and copies that change shape: reshape/view, transpose, permute, flatten, expand,
// unsqueeze, squeeze, narrow, contiguous, clone, cat. A view's backward is the inverse view of
// the gradient; a copy's backward passes the gradient through.
#include "ops/shape.h"

#include <algorithm>
#include <numeric>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/copy.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/record.h"

namespace hg {


namespace {

// Strides for viewing (shape, strides) as `target` without a copy, or nullopt if impossible.
// The old dims are grouped into chunks that are contiguous with each other (innermost first);
// the target dims, read from the innermost, must split every chunk exactly.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& target) {
  if (checked_numel(shape, "view") == 0) return contiguous_strides(target);
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (elements, stride of the innermost dim)
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!chunks.empty() && strides[d] == chunks.back().first * chunks.back().second) chunks.back().first *= shape[d];
    else chunks.emplace_back(shape[d], strides[d]);
  }
  Shape out(target.size());
  size_t chunk = 0;
  int64_t consumed = 1;  // elements of the current chunk covered by the target dims so far
  for (int d = target.ndim() - 1; d >= 0; --d) {
    out[d] = consumed * (chunk < chunks.size() ? chunks[chunk].second : 1);
    if (target[d] == 1) continue;
    if (chunk == chunks.size()) return std::nullopt;
    consumed *= target[d];
    if (chunks[chunk].first % consumed != 0) return std::nullopt;  // this dim straddles two chunks
    if (consumed == chunks[chunk].first) {
      ++chunk;
      consumed = 1;
    }
  }
  if (chunk != chunks.size()) return std::nullopt;
  return out;
}

// Resolves one -1 in `shape` and checks that the element counts agree.
Shape infer_shape(Shape shape, int64_t numel, std::string_view op) {
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == -1) {
      HG_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape);
      infer = d;
    } else {
      HG_CHECK(shape[d] >= 0, op, ": invalid size ", shape[d], " in shape ", shape);
      HG_CHECK(!__builtin_mul_overflow(known, shape[d], &known), op, ": shape ", shape, " overflows int64");
    }
  }
  if (infer >= 0) {
    HG_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input of size ", numel);
    shape[infer] = numel / known;
  }
  HG_CHECK(known * (infer >= 0 ? shape[infer] : 1) == numel, op, ": shape ", shape,
           " is invalid for input of size ", numel);
  return shape;
}

}  // namespace

// ---- reshape / view / flatten ------------------------------------------------------------------

Tensor Tensor::view(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), "view");
  const std::optional<Shape> strides = view_strides(this->shape(), this->strides(), shape);
  HG_CHECK(strides.has_value(), "view: size ", shape, " is not compatible with the input's size ", this->shape(),
           " and strides ", this->strides(), " (at least one dimension spans two contiguous subspaces); use "
           "reshape(), which copies");
  Tensor out = detail::alias(*this, shape, *strides, storage_offset());
  record(amp::Op::View, out, {*this}, [in_shape = this->shape()](const Tensor& g) -> std::vector<Tensor> {
    return {g.reshape(in_shape)};
  });
  return out;
}

Tensor Tensor::reshape(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), "reshape");
  if (view_strides(this->shape(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int start_dim, int end_dim) const {
  if (dim() == 0) return reshape({1});
  const int start = normalize_dim(start_dim, dim(), "flatten"), end = normalize_dim(end_dim, dim(), "flatten");
  HG_CHECK(start <= end, "flatten: start_dim (", start_dim, ") must not come after end_dim (", end_dim, ")");
  Shape shape(this->shape().begin(), this->shape().begin() + start);
  int64_t merged = 1;
  for (int d = start; d <= end; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + end + 1, this->shape().end());
  return reshape(shape);
}

// ---- transpose / permute -----------------------------------------------------------------------

Tensor Tensor::permute(Shape dims) const {
  HG_CHECK(dims.ndim() == dim(), "permute: got ", dims.size(), " dims ", dims, " for a ", dim(), "-d tensor");
  Shape shape(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (int i = 0; i < dims.ndim(); ++i) {
    const int d = normalize_dim(dims[i], dim(), "permute");
    HG_CHECK(!seen[d], "permute: dimension ", d, " repeats in ", dims);
    seen[d] = true;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
    inverse[d] = i;
  }
  Tensor out = detail::alias(*this, shape, strides, storage_offset());
  record(amp::Op::Permute, out, {*this}, [inverse](const Tensor& g) -> std::vector<Tensor> { return {g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  Shape dims(static_cast<size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  if (dim() == 0) return *this;
  std::swap(dims[normalize_dim(dim0, dim(), "transpose")], dims[normalize_dim(dim1, dim(), "transpose")]);
  return permute(dims);
}

// ---- expand / unsqueeze / squeeze / narrow -----------------------------------------------------

Tensor expand(const Tensor& x, const Shape& shape) {
  HG_CHECK(shape.ndim() >= x.dim(), "expand: cannot expand shape ", x.shape(), " to the smaller rank of ", shape);
  if (shape == x.shape()) return x;
  const int lead = shape.ndim() - x.dim();
  Shape strides(shape.size(), 0);
  for (int d = 0; d < x.dim(); ++d) {
    const int64_t from = x.shape()[d], to = shape[lead + d];
    HG_CHECK(from == to || from == 1, "expand: the expanded size ", to, " must match the existing size ", from,
             " at non-singleton dimension ", lead + d, " (shape ", x.shape(), " to ", shape, ")");
    strides[lead + d] = from == 1 && to != 1 ? 0 : x.strides()[d];
  }
  Tensor out = detail::alias(x, shape, strides, x.storage_offset());
  record(amp::Op::Expand, out, {x}, [in = x.shape()](const Tensor& g) -> std::vector<Tensor> { return {sum_to(g, in)}; });
  return out;
}

Tensor unsqueeze(const Tensor& x, int dim) {
  const int d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return x.view(shape);
}

Tensor squeeze(const Tensor& x, int dim) {
  const int d = normalize_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0) return x;
  HG_CHECK(x.shape()[d] == 1, "squeeze: dimension ", dim, " has size ", x.shape()[d], ", not 1 (shape ", x.shape(), ")");
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  return x.view(shape);
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  const int d = normalize_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[d];
  HG_CHECK(start >= 0 && length >= 0 && start <= size - length, "narrow: [", start, ", ", start, " + ", length,
           ") is out of range for dimension ", dim, " of size ", size);
  Shape shape = x.shape();
  shape[d] = length;
  Tensor out = detail::alias(x, shape, x.strides(), x.storage_offset() + start * x.strides()[d]);
  record(amp::Op::Narrow, out, {x}, [in = x.shape(), options = x.options(), d, start](const Tensor& g) -> std::vector<Tensor> {
    Tensor full = zeros(in, options);
    narrow(full, d, start, g.shape()[d]).copy_(g);
    return {full};
  });
  return out;
}

// ---- copies: contiguous / clone / cat ----------------------------------------------------------

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), options());
  detail::copy_into(out, *this);
  record(amp::Op::Clone, out, {*this}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  HG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expects each tensor to be equal size, but got ",
             tensors[0].shape(), " at entry 0 and ", tensors[i].shape(), " at entry ", i);
    unsqueezed.push_back(unsqueeze(tensors[i], d));
  }
  return cat(unsqueezed, d);
}

namespace {

// The pieces of x along dim d with these sizes, as views recorded under ONE node whose backward
// is a single cat of their gradients (zeros for a piece that got none). A narrow per piece would
// give each piece a gradient the size of x, summed piece by piece: O(pieces x size of x), which
// turns a loop over the T steps of a sequence quadratic in T.
std::vector<Tensor> pieces_along(const Tensor& x, int d, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> pieces;
  if (sizes.empty()) return pieces;
  const Tensor base = x.detach();
  int64_t start = 0;
  for (int64_t size : sizes) {
    Shape shape = x.shape();
    shape[d] = size;
    pieces.push_back(detail::alias(base, shape, x.strides(), x.storage_offset() + start * x.strides()[d]));
    start += size;
  }
  record(amp::Op::Narrow, pieces, {x}, [d](std::vector<Tensor> grads) { return std::vector<Tensor>{cat(grads, d)}; });
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t size, int dim) {
  const int d = normalize_dim(dim, x.dim(), "split");
  const int64_t length = x.shape()[d];
  HG_CHECK(size > 0 || (size == 0 && length == 0), "split: split_size can only be 0 if dimension size is 0, got ",
           "split_size ", size, " for dimension ", dim, " of size ", length);
  if (length == 0) return {narrow(x, d, 0, 0)};  // an empty dim still gives one (empty) piece
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < length; start += size) sizes.push_back(std::min(size, length - start));
  return pieces_along(x, d, sizes);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  const int d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t size : sizes) {
    HG_CHECK(size >= 0, "split: sizes must be non-negative, got ", Shape(sizes));
    total += size;
  }
  HG_CHECK(total == x.shape()[d], "split: sizes ", Shape(sizes), " must add up to ", x.shape()[d],
           " (the size of dimension ", dim, "), they add up to ", total);
  return pieces_along(x, d, sizes);
}

std::vector<Tensor> chunk(const Tensor& x, int n, int dim) {
  HG_CHECK(n > 0, "chunk: expected the number of chunks to be greater than 0, got ", n);
  const int d = normalize_dim(dim, x.dim(), "chunk");
  const int64_t length = x.shape()[d];
  if (length == 0) {  // n empty pieces, as PyTorch
    std::vector<Tensor> pieces;
    for (int i = 0; i < n; ++i) pieces.push_back(narrow(x, d, 0, 0));
    return pieces;
  }
  return split(x, (length + n - 1) / n, d);
}

Tensor cat(const std::vector<Tensor>& inputs, int dim) {
  HG_CHECK(!inputs.empty(), "cat: expected a non-empty list of tensors");
  std::vector<Tensor> tensors = amp::prepare_all(amp::Op::Cat, inputs);
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors) {
    detail::check_same_device("cat", tensors[0], t);
    dtype = promote_types(dtype, t.dtype());
  }
  const Tensor& first = tensors[0];
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    HG_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has ", t.dim(), " dims, tensor 0 has ", first.dim());
    for (int k = 0; k < t.dim(); ++k)
      HG_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat: sizes must match except in dimension ", d,
               "; tensor ", i, " has shape ", t.shape(), ", tensor 0 has shape ", first.shape());
    shape[d] += t.shape()[d];
  }
  Tensor out = empty(shape, {.dtype = dtype, .device = first.device()});
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  for (Tensor& t : tensors) {
    t = t.to(dtype);
    detail::copy_into(narrow(out.detach(), d, offset, t.shape()[d]), t);
    sizes.push_back(t.shape()[d]);
    offset += t.shape()[d];
  }
  record(amp::Op::Cat, out, tensors, [sizes, d](const Tensor& g) { return split(g, sizes, d); });
  return out;
}

}  // namespace hg
