// hg::Tensor: a cheap handle (copies share the same data) to an n-d array with a dtype, a device,
// strides into a shared Storage, and the autograd fields (requires_grad, grad, grad_fn).
//
//   hg::Tensor x = hg::randn({2, 3}, {.requires_grad = true});
//   hg::Tensor y = hg::sum(x * x);   y.backward();   x.grad();   // 2 * x
//
// Methods that are ops (to, reshape, transpose, operators ...) are declared here for the familiar
// spelling and defined with their op family in ops/ (e.g. Tensor::to in autograd/cast.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/float8.h"
#include "core/half.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/visit.h"

namespace hg {

namespace autograd {
class Node;
}
class Tensor;

// Runs after backward has accumulated a gradient into a leaf's .grad() (see
// Tensor::register_post_accumulate_grad_hook).
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

struct TensorOptions {
  DType dtype = f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// What a Tensor handle points to. Views share `storage` and differ in shape/strides/offset.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements, from storage->data()
  DType dtype = f32;

  // ---- autograd ----
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;          // the op that produced this tensor (null for leaves)
  uint32_t output_nr = 0;                           // which of grad_fn's outputs this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;   // a leaf's AccumulateGrad node, while a graph uses it
  std::vector<std::pair<int64_t, PostAccumulateGradHook>> post_accumulate_grad_hooks;  // (id, hook)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t size(int dim) const;
  int dim() const { return shape().ndim(); }
  int64_t numel() const;
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  int64_t storage_offset() const { return checked().offset; }
  bool is_contiguous() const;
  TensorOptions options() const { return {dtype(), device(), false}; }

  // ---- conversions and views (ops; defined in autograd/cast.cpp and ops/shape.cpp) ----
  Tensor to(DType dtype) const;
  // To an 8-bit float, choosing what overflow gives (core/float8.h): Float8Overflow::Saturate
  // clamps to +-448 (e4m3) / +-57344 (e5m2) instead of NaN / inf. FP8 results carry no gradient.
  Tensor to(DType dtype, Float8Overflow overflow) const;
  Tensor to(Device device) const;
  Tensor contiguous() const;
  Tensor reshape(Shape shape) const;
  Tensor view(Shape shape) const;  // like reshape, but throws instead of copying
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(Shape dims) const;
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor clone() const;
  Tensor detach() const;  // same data, no autograd history

  // ---- element access (copies to the CPU and converts as needed) ----
  template <class T> T item() const;
  template <class T> std::vector<T> to_vector() const;
  template <class T> T* data_ptr() const;  // T must be the tensor's own element type
  void* raw_data() const;                   // address of element 0 (device memory on CUDA)

  // ---- autograd ----
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& requires_grad_(bool requires_grad = true);
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // replaces .grad() (optimizers, GradScaler)
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  void backward(const Tensor& grad = {}) const;
  // Calls hook(leaf) each time a backward has finished accumulating into this leaf's .grad()
  // (once per backward that reaches the leaf, after every path's gradient was summed), like
  // PyTorch's register_post_accumulate_grad_hook: DataParallel starts a bucket's all-reduce from
  // it while backward goes on. Leaves that require grad only. Returns an id for removal.
  int64_t register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  void remove_post_accumulate_grad_hook(int64_t id) const;  // an unknown id is ignored

  // ---- in-place writes: not recorded by autograd; they bump the version counter ----
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);                  // broadcasts and converts src into this
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other
  Tensor& mul_(double factor);

  // Points this tensor (and every handle sharing it) at other's data, shape and dtype, keeping
  // its autograd identity: how Module::to(DType) converts parameters in place. Drops .grad().
  void set_data(const Tensor& other) const;

  // ---- plumbing for ops ----
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  TensorImpl& checked() const {
    HG_CHECK(impl_ != nullptr, "tensor: operation on an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories ----
Tensor empty(Shape shape, TensorOptions options = {});
Tensor zeros(Shape shape, TensorOptions options = {});
Tensor ones(Shape shape, TensorOptions options = {});
Tensor full(Shape shape, double value, TensorOptions options = {});
Tensor arange(int64_t n, TensorOptions options = {});  // 0, 1, ..., n-1 in options.dtype
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// Copies `values` into a new tensor. Without options the dtype is T's; with options the values
// are converted to options.dtype.
template <class T> Tensor from_vector(const std::vector<T>& values, Shape shape);
template <class T> Tensor from_vector(const std::vector<T>& values, Shape shape, TensorOptions options);
// A view of existing memory: shape/strides/offset over `base`'s storage (no copy, no autograd).
Tensor as_strided(const Tensor& base, Shape shape, Shape strides, int64_t offset);

// ---- template definitions ----

namespace detail {
// A new handle on base's storage with the given geometry (no checks, no autograd history): the
// one place views, detach() and as_strided build their TensorImpl.
Tensor alias(const Tensor& base, Shape shape, Shape strides, int64_t offset);
// A fresh tensor made a leaf that requires grad (the factories' `.requires_grad = true`; only
// floating tensors can). The flag only: Tensor::requires_grad_ is autograd's.
void make_leaf_require_grad(Tensor& t);
void check_dtype_matches(const Tensor& t, DType expected, std::string_view what);
// Copies the tensor to a contiguous CPU buffer of dtype `dtype` (for item/to_vector).
Tensor to_cpu_contiguous(const Tensor& t, DType dtype);
// A fresh tensor with `options` (dtype, device, requires_grad) holding t's values (for the factories).
Tensor copy_with_options(const Tensor& t, TensorOptions options);
}  // namespace detail

template <class T> T* Tensor::data_ptr() const {
  detail::check_dtype_matches(*this, dtype_of<T>(), "data_ptr");
  return static_cast<T*>(raw_data());
}

template <class T> T Tensor::item() const {
  HG_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ", shape(),
           ") cannot be converted to a scalar");
  return *detail::to_cpu_contiguous(*this, dtype_of<T>()).template data_ptr<T>();
}

template <class T> std::vector<T> Tensor::to_vector() const {
  const Tensor c = detail::to_cpu_contiguous(*this, dtype_of<T>());
  const T* p = c.template data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <class T> Tensor from_vector(const std::vector<T>& values, Shape shape) {
  const int64_t n = checked_numel(shape, "from_vector");
  HG_CHECK(int64_t(values.size()) == n, "from_vector: ", values.size(), " values do not fill shape ",
           shape, " (", n, " elements)");
  Tensor t = empty(shape, {.dtype = dtype_of<T>()});
  std::copy(values.begin(), values.end(), t.data_ptr<T>());
  return t;
}

template <class T> Tensor from_vector(const std::vector<T>& values, Shape shape, TensorOptions options) {
  return detail::copy_with_options(from_vector(values, std::move(shape)), options);
}

}  // namespace hg
