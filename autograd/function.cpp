// Context and the gradient checks of custom Functions (autograd/function.h).
#include "autograd/function.h"

namespace hg::autograd {

void Context::save_for_backward(const std::vector<Tensor>& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t, op_name_);  // op_name_ outlives the saved tensors
}

std::vector<Tensor> Context::saved() const {
  std::vector<Tensor> out;
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

namespace detail {
void check_function_grads(const std::string& name, const std::vector<Tensor>& grads, const std::vector<Shape>& shapes) {
  HG_CHECK(grads.size() == shapes.size(), name, ": backward returned ", grads.size(), " gradients, but forward took ",
           shapes.size(), " tensor arguments (return an undefined Tensor() for inputs without a gradient)");
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined())
      HG_CHECK(grads[i].shape() == shapes[i], name, ": backward returned a gradient of shape ", grads[i].shape(),
               " for input ", i, " of shape ", shapes[i]);
}
}  // namespace detail

}  // namespace hg::autograd
