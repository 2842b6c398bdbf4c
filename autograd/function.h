// Custom differentiable ops, the way PyTorch's torch.autograd.Function works:
//
//   struct Mish : hg::autograd::Function<Mish> {
//     static constexpr const char* name = "mish";     // for error messages and the AMP policy table
//     static hg::Tensor forward(hg::autograd::Context& ctx, const hg::Tensor& x) {
//       ctx.save_for_backward({x});
//       return x * hg::tanh(softplus(x));
//     }
//     static std::vector<hg::Tensor> backward(hg::autograd::Context& ctx, std::vector<hg::Tensor> grad_outputs) {
//       const hg::Tensor x = ctx.saved()[0];
//       return {grad_outputs[0] * mish_derivative(x)};  // one gradient per tensor argument
//     }
//   };
//   hg::Tensor y = Mish::apply(x);
//
// apply() does the op's bookkeeping: casts the tensor arguments by the op's autocast policy
// (amp::set_policy(name, ...)), runs forward without recording, connects the result to the
// graph, and checks the gradients backward returns (count and shapes). backward runs under the
// same autocast state as forward did. Non-tensor arguments (double, int, ...) pass through.
//
// Under autocast an op needs a policy (amp::set_policy), or it declares its own input dtype:
//   static constexpr hg::DType cast_inputs = hg::f32;   // PyTorch's custom_fwd(cast_inputs=...)
// which casts its floating inputs to that dtype and runs forward (and backward) with autocast
// off, so the op computes in exactly that dtype.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace hg::autograd {

class Context {
 public:
  void save_for_backward(const std::vector<Tensor>& tensors);
  // The saved tensors; throws if one was modified in place since it was saved.
  std::vector<Tensor> saved() const;
  // Whether input i (counting tensor arguments only) needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // Non-tensor values the backward needs (e.g. ctx.saved_data["alpha"] = alpha).
  std::map<std::string, double> saved_data;

 private:
  template <class> friend struct Function;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
  std::string op_name_ = "custom op";
  bool autocast_enabled_ = false;
  DType autocast_dtype_ = f16;
};

namespace detail {
template <class T>
inline constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

template <class Op>
const char* function_name() {
  if constexpr (requires { Op::name; }) return Op::name;
  else return "custom op";
}

// Checks the gradients a custom backward returned against the op's tensor inputs.
void check_function_grads(const std::string& name, const std::vector<Tensor>& grads, const std::vector<Shape>& shapes);
}  // namespace detail

template <class Derived>
struct Function {
  template <class... Args>
  static Tensor apply(Args&&... args) {
    const char* name = detail::function_name<Derived>();
    // The tensor arguments, in order, prepared by the op's autocast policy.
    std::vector<Tensor> inputs;
    (collect(inputs, args), ...);
    auto ctx = std::make_shared<Context>();
    ctx->op_name_ = name;
    ctx->autocast_enabled_ = amp::is_enabled();
    ctx->autocast_dtype_ = amp::autocast_dtype();
    if constexpr (requires { Derived::cast_inputs; }) {
      if (ctx->autocast_enabled_) {
        amp::detail::cast_inputs(name, inputs, Derived::cast_inputs);
        ctx->autocast_enabled_ = false;  // forward and backward run in cast_inputs, autocast off
      }
    } else {
      inputs = amp::prepare_all(name, std::move(inputs));
    }
    for (const Tensor& t : inputs) ctx->needs_input_grad_.push_back(GradMode::is_enabled() && t.defined() && t.requires_grad());

    Tensor out;
    {
      NoGradGuard no_grad;
      amp::Autocast forward_state(ctx->autocast_dtype_, ctx->autocast_enabled_);
      size_t next = 0;
      // NOTE: a braced list is evaluated left to right (function arguments are not), so the
      // k-th tensor argument really receives inputs[k].
      std::tuple<decltype(substitute(std::forward<Args>(args), inputs, next))...> call_args{
          substitute(std::forward<Args>(args), inputs, next)...};
      out = std::apply([&](auto&&... a) { return Derived::forward(*ctx, std::forward<decltype(a)>(a)...); },
                       std::move(call_args));
    }
    // A forward that returns one of its inputs must not turn that input into a non-leaf.
    for (const Tensor& t : inputs)
      if (out.is_same(t)) out = out.detach();
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.defined() ? t.shape() : Shape{});
    record(name, out, inputs, [ctx, shapes](const Tensor& g) -> std::vector<Tensor> {
      // Backward sees the autocast state forward saw (PyTorch's custom_bwd).
      amp::Autocast same_as_forward(ctx->autocast_dtype_, ctx->autocast_enabled_);
      std::vector<Tensor> grads = Derived::backward(*ctx, {g});
      detail::check_function_grads(ctx->op_name_, grads, shapes);
      return grads;
    });
    return out;
  }

 private:
  template <class A>
  static void collect(std::vector<Tensor>& inputs, const A& arg) {
    if constexpr (detail::is_tensor_v<A>) inputs.push_back(arg);
  }
  // Each tensor argument is replaced by its prepared version; other arguments pass through.
  template <class A>
  static decltype(auto) substitute(A&& arg, const std::vector<Tensor>& inputs, size_t& next) {
    if constexpr (detail::is_tensor_v<A>) return static_cast<const Tensor&>(inputs[next++]);
    else return std::forward<A>(arg);
  }
};

}  // namespace hg::autograd
