// The autograd methods of hg::Tensor: requires_grad_, grad, backward, detach.
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace hg {

Tensor& Tensor::requires_grad_(bool requires_grad) {
  HG_CHECK(!requires_grad || is_floating(dtype()), "requires_grad_: only floating tensors can require "
           "gradients, got a ", dtype(), " tensor of shape ", shape());
  HG_CHECK(is_leaf(), "requires_grad_: can only change the flag of a leaf tensor (this one was produced by '",
           grad_fn()->name(), "'); use detach() to start a new leaf");
  impl()->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl_ptr() ? impl()->grad : nullptr); }

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    HG_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
             "set_grad: gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(), " does not match tensor ",
             shape(), " ", dtype(), " on ", device());
  }
  impl()->grad = grad.impl_ptr();
}

void Tensor::backward(const Tensor& grad) const { autograd::run_backward(*this, grad); }

Tensor Tensor::detach() const { return detail::alias(*this, shape(), strides(), storage_offset()); }

}  // namespace hg
