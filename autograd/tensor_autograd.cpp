// The autograd methods of hg::Tensor: requires_grad_, grad, backward, detach.
#include <atomic>

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

int64_t Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  HG_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only a leaf tensor that requires "
           "grad accumulates gradients (this one ", is_leaf() ? "does not require grad" : "is not a leaf", ")");
  HG_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: empty hook");
  // Ids only grow, so removing one hook never removes a later one registered in its place.
  static std::atomic<int64_t> next_id{1};
  const int64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  impl()->post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(int64_t id) const {
  auto& hooks = impl()->post_accumulate_grad_hooks;
  std::erase_if(hooks, [id](const auto& entry) { return entry.first == id; });
}

Tensor Tensor::detach() const { return detail::alias(*this, shape(), strides(), storage_offset()); }

}  // namespace hg
