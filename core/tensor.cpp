// Tensor metadata, the factories that need no randomness, and raw element access. Methods that
// are ops live with their op family in ops/; autograd methods in autograd/tensor_autograd.cpp.
#include "core/tensor.h"

#include <cstring>

#include "core/copy.h"
#include "core/fill.h"

namespace hg {

// ---- metadata ----------------------------------------------------------------------------------

int64_t Tensor::size(int dim) const {
  return shape()[normalize_dim(dim, this->dim(), "size")];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape()) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  int64_t expected = 1;
  for (int d = t.shape.ndim() - 1; d >= 0; --d) {
    if (t.shape[d] == 0) return true;
    if (t.shape[d] == 1) continue;  // the stride of a size-1 dimension never matters
    if (t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked();
  char* base = static_cast<char*>(t.storage->data());
  return base == nullptr ? nullptr : base + t.offset * int64_t(element_size(t.dtype));
}

void Tensor::set_data(const Tensor& other) const {
  TensorImpl& t = checked();
  HG_CHECK(other.defined(), "set_data: undefined source tensor");
  t.storage = other.impl()->storage;
  t.shape = other.shape();
  t.strides = other.strides();
  t.offset = other.storage_offset();
  t.dtype = other.dtype();
  t.grad = nullptr;
}

namespace detail {

void make_leaf_require_grad(Tensor& t) {
  HG_CHECK(is_floating(t.dtype()), "requires_grad_: only floating tensors can require gradients, got a ", t.dtype(),
           " tensor of shape ", t.shape());
  t.impl()->requires_grad = true;
}

Tensor copy_with_options(const Tensor& t, TensorOptions options) {
  Tensor out = empty(t.shape(), {.dtype = options.dtype, .device = options.device});
  copy_into(out, t);
  if (options.requires_grad) make_leaf_require_grad(out);
  return out;
}

Tensor alias(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void check_dtype_matches(const Tensor& t, DType expected, std::string_view what) {
  HG_CHECK(t.dtype() == expected, what, ": the tensor holds ", t.dtype(), " elements, but ", expected,
           " was requested (convert first with .to(hg::", expected, "))");
}

Tensor to_cpu_contiguous(const Tensor& t, DType dtype) {
  if (t.device().is_cpu() && t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), {.dtype = dtype});
  copy_into(out, t);
  return out;
}

}  // namespace detail

// ---- factories ---------------------------------------------------------------------------------

Tensor empty(Shape shape, TensorOptions options) {
  const int64_t numel = checked_numel(shape, "empty");
  const int64_t nbytes = checked_nbytes(numel, element_size(options.dtype), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(nbytes, options.device);
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = options.dtype;
  Tensor t(std::move(impl));
  if (options.requires_grad) detail::make_leaf_require_grad(t);
  return t;
}

Tensor full(Shape shape, double value, TensorOptions options) {
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;  // fill first: in-place writes are not allowed on grad tensors
  Tensor t = empty(std::move(shape), options);
  detail::fill(t, value);
  if (requires_grad) detail::make_leaf_require_grad(t);
  return t;
}

Tensor zeros(Shape shape, TensorOptions options) { return full(std::move(shape), 0.0, options); }
Tensor ones(Shape shape, TensorOptions options) { return full(std::move(shape), 1.0, options); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

Tensor arange(int64_t n, TensorOptions options) {
  HG_CHECK(n >= 0, "arange: expected n >= 0, got ", n);
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = i;
  return from_vector(values, {n}, options);
}

Tensor as_strided(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  HG_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ", strides,
           " differ in length");
  const int64_t numel = checked_numel(shape, "as_strided");
  HG_CHECK(offset >= 0, "as_strided: negative storage offset ", offset);
  // The furthest element must lie inside the storage; checked arithmetic, as for allocations.
  int64_t last = offset;
  if (numel > 0) {
    for (size_t d = 0; d < shape.size(); ++d) {
      HG_CHECK(strides[d] >= 0, "as_strided: negative stride ", strides[d]);
      int64_t reach = 0;
      HG_CHECK(!__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) &&
                   !__builtin_add_overflow(last, reach, &last),
               "as_strided: shape ", shape, " with strides ", strides, " overflows int64");
    }
    const int64_t capacity = base.impl()->storage->nbytes() / int64_t(element_size(base.dtype()));
    HG_CHECK(last < capacity, "as_strided: view of shape ", shape, ", strides ", strides, " and offset ", offset,
             " reaches element ", last, " of a storage with ", capacity, " elements");
  }
  return detail::alias(base, std::move(shape), std::move(strides), offset);
}

}  // namespace hg
