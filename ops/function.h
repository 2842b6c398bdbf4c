// Custom differentiable ops, the way PyTorch's torch.autograd.Function works:
//
//   struct Mish : hg::autograd::Function<Mish> {
//     static constexpr const char* name = "mish";     // required: the graph, errors, the AMP table
//     static constexpr hg::amp::CastPolicy policy = hg::amp::CastPolicy::F32;  // under autocast
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
// apply() does the op's bookkeeping: casts the tensor arguments by the op's autocast policy,
// runs forward without recording, connects the result to the graph, and checks the gradients
// backward returns (count and shapes). backward runs under the same autocast state as forward
// did. Non-tensor arguments (double, int, ...) pass through; forward keeps non-tensor values for
// backward with ctx.save("beta", beta) and backward reads them with ctx.get<double>("beta").
//
// (A Function is a namespace-scope struct: C++ gives a class local to a function no static data
// members, so it could not hold its name.)
//
// The AMP policy lives on the type, in one of two ways (declaring neither falls back to the
// runtime table: amp::set_policy(name, ...), else running under autocast is an hg::Error):
//   static constexpr hg::amp::CastPolicy policy = hg::amp::CastPolicy::F32;  // like a built-in op:
//       inputs cast by the policy, forward runs with autocast on (its ops follow their own policies)
//   static constexpr hg::DType cast_inputs = hg::f32;   // PyTorch's custom_fwd(cast_inputs=...):
//       floating inputs cast to that dtype, forward and backward run with autocast off
//
// Several outputs: forward may return std::vector<Tensor>, std::array<Tensor, N> or
// std::tuple<Tensor, ...>; apply returns the same type, and backward receives one gradient per
// output (zeros for an output the loss did not use; an undefined Tensor for integer outputs,
// which stay off the graph).
#pragma once
#include <any>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace hg::autograd {

namespace detail {
[[noreturn]] void saved_value_missing(const std::string& op, std::string_view key, const std::vector<std::string>& keys);
[[noreturn]] void saved_value_wrong_type(const std::string& op, std::string_view key, const std::type_info& saved,
                                         const std::type_info& asked);
}  // namespace detail

class Context {
 public:
  void save_for_backward(const std::vector<Tensor>& tensors);
  // The saved tensors; throws if one was modified in place since it was saved.
  std::vector<Tensor> saved() const;
  // Whether input i (counting tensor arguments only) needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }

  // Non-tensor values the backward needs, of any copyable type: ctx.save("alpha", alpha) in
  // forward, ctx.get<double>("alpha") in backward. get<T> wants exactly the saved type (an int
  // saved is not a double read); a missing key or another type is an hg::Error naming the op.
  template <class T>
  void save(std::string key, T value) {
    static_assert(std::is_copy_constructible_v<T>, "Context::save: the value must be copyable");
    data_.insert_or_assign(std::move(key), std::any(std::move(value)));
  }
  template <class T>
  const T& get(std::string_view key) const {
    auto it = data_.find(key);
    if (it == data_.end()) detail::saved_value_missing(op_name_, key, saved_keys());
    const T* value = std::any_cast<T>(&it->second);
    if (value == nullptr) detail::saved_value_wrong_type(op_name_, key, it->second.type(), typeid(T));
    return *value;
  }
  bool contains(std::string_view key) const { return data_.find(key) != data_.end(); }

 private:
  template <class> friend struct Function;
  std::vector<std::string> saved_keys() const;
  std::vector<SavedTensor> saved_;
  std::map<std::string, std::any, std::less<>> data_;
  std::vector<bool> needs_input_grad_;
  std::string op_name_;
  bool autocast_enabled_ = false;
  DType autocast_dtype_ = f16;
};

namespace detail {
template <class T>
inline constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

// What forward may return, and how apply turns it into a list of outputs and back.
template <class R>
struct Outputs {
  static_assert(sizeof(R) == 0, "Function<T>: forward must return hg::Tensor, std::vector<hg::Tensor>, "
                                "std::array<hg::Tensor, N> or std::tuple<hg::Tensor, ...>");
};
template <>
struct Outputs<Tensor> {
  static std::vector<Tensor> flatten(Tensor t) { return {std::move(t)}; }
  static Tensor rebuild(std::vector<Tensor>& v) { return std::move(v[0]); }
};
template <>
struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(std::vector<Tensor> v) { return v; }
  static std::vector<Tensor> rebuild(std::vector<Tensor>& v) { return std::move(v); }
};
template <size_t N>
struct Outputs<std::array<Tensor, N>> {
  static std::vector<Tensor> flatten(std::array<Tensor, N> a) { return {a.begin(), a.end()}; }
  static std::array<Tensor, N> rebuild(std::vector<Tensor>& v) {
    std::array<Tensor, N> a;
    for (size_t i = 0; i < N; ++i) a[i] = std::move(v[i]);
    return a;
  }
};
template <class... Ts>
struct Outputs<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "Function<T>: a tuple forward returns must hold only hg::Tensor");
  static std::vector<Tensor> flatten(std::tuple<Ts...> t) {
    return std::apply([](auto&&... ts) { return std::vector<Tensor>{std::move(ts)...}; }, std::move(t));
  }
  static std::tuple<Ts...> rebuild(std::vector<Tensor>& v) {
    return [&]<size_t... I>(std::index_sequence<I...>) { return std::tuple<Ts...>{std::move(v[I])...}; }(
        std::index_sequence_for<Ts...>{});
  }
};

// Checks a custom forward's outputs (defined, not an alias of another output) and a custom
// backward's gradients (one per tensor input, of its shape).
void check_function_outputs(const std::string& name, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);
void check_function_grads(const std::string& name, const std::vector<Tensor>& grads, const std::vector<Shape>& shapes);
}  // namespace detail

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    static_assert(requires { Derived::name; },
                  "hg::autograd::Function<T>: T needs a name (for the graph, error messages and the AMP policy "
                  "table). Add to T: static constexpr const char* name = \"my_op\";");
    static_assert(std::is_convertible_v<decltype(Derived::name), std::string_view>,
                  "hg::autograd::Function<T>: T::name must be a string: static constexpr const char* name = \"my_op\";");
    static_assert(!(requires { Derived::policy; } && requires { Derived::cast_inputs; }),
                  "hg::autograd::Function<T>: declare either `policy` or `cast_inputs`, not both");
    const std::string_view name = Derived::name;
    // The tensor arguments, in order, prepared by the op's autocast policy.
    std::vector<Tensor> inputs;
    (collect(inputs, args), ...);
    auto ctx = std::make_shared<Context>();
    ctx->op_name_ = name;
    ctx->autocast_enabled_ = amp::is_enabled();
    ctx->autocast_dtype_ = amp::autocast_dtype();
    prepare_by_policy(*ctx, inputs);
    for (const Tensor& t : inputs) ctx->needs_input_grad_.push_back(GradMode::is_enabled() && t.defined() && t.requires_grad());

    auto result = [&] {
      NoGradGuard no_grad;
      amp::Autocast forward_state(ctx->autocast_dtype_, ctx->autocast_enabled_);
      size_t next = 0;
      // NOTE: a braced list is evaluated left to right (function arguments are not), so the
      // k-th tensor argument really receives inputs[k].
      std::tuple<decltype(substitute(std::forward<Args>(args), inputs, next))...> call_args{
          substitute(std::forward<Args>(args), inputs, next)...};
      return std::apply([&](auto&&... a) { return Derived::forward(*ctx, std::forward<decltype(a)>(a)...); },
                        std::move(call_args));
    }();
    using Result = decltype(result);
    std::vector<Tensor> outputs = detail::Outputs<Result>::flatten(std::move(result));
    detail::check_function_outputs(ctx->op_name_, outputs, inputs);
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.defined() ? t.shape() : Shape{});
    if constexpr (std::is_same_v<Result, Tensor>) {
      record(std::string(name), outputs[0], inputs,
             [ctx, shapes](const Tensor& g) -> std::vector<Tensor> { return backward_checked(*ctx, shapes, {g}); });
    } else {
      record(std::string(name), outputs, inputs, [ctx, shapes](std::vector<Tensor> grads) -> std::vector<Tensor> {
        return backward_checked(*ctx, shapes, std::move(grads));
      });
    }
    return detail::Outputs<Result>::rebuild(outputs);
  }

 private:
  // Casts the tensor arguments as the op's type (or the runtime table) says.
  static void prepare_by_policy(Context& ctx, std::vector<Tensor>& inputs) {
    if constexpr (requires { Derived::cast_inputs; }) {
      if (ctx.autocast_enabled_) {
        amp::detail::cast_inputs(Derived::name, inputs, Derived::cast_inputs);
        ctx.autocast_enabled_ = false;  // forward and backward run in cast_inputs, autocast off
      }
    } else if constexpr (requires { Derived::policy; }) {
      static_assert(std::is_same_v<std::remove_cv_t<decltype(Derived::policy)>, amp::CastPolicy>,
                    "hg::autograd::Function<T>: T::policy must be an hg::amp::CastPolicy");
      // The op joins amp::policy_table() on its first apply, so the table lists what runs.
      static const bool in_table = (amp::set_policy(Derived::name, Derived::policy), true);
      (void)in_table;
      inputs = amp::prepare_all(Derived::name, std::move(inputs), Derived::policy);
    } else {
      inputs = amp::prepare_all(Derived::name, std::move(inputs));
    }
  }

  static std::vector<Tensor> backward_checked(Context& ctx, const std::vector<Shape>& shapes, std::vector<Tensor> grads) {
    // Backward sees the autocast state forward saw (PyTorch's custom_bwd).
    amp::Autocast same_as_forward(ctx.autocast_dtype_, ctx.autocast_enabled_);
    std::vector<Tensor> input_grads = Derived::backward(ctx, std::move(grads));
    detail::check_function_grads(ctx.op_name_, input_grads, shapes);
    return input_grads;
  }

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
