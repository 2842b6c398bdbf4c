// Autocast: a thread-local region in which ops cast their floating inputs by the cast policy
// (amp/op_table.h, amp/policy.h) before they compute. PyTorch's torch.autocast, as an RAII guard:
//
//   { hg::amp::Autocast ac(hg::f16);          // matmul/linear/conv2d in f16, softmax/loss in f32
//     loss = hg::cross_entropy(model(x), y); }
//   { hg::amp::Autocast off(hg::f16, false); ... }   // turned off inside an enabled region
//
// Every op starts with `auto [a, b] = amp::prepare(amp::Op::Add, a_in, b_in);` (then checks what it
// got; docs/architecture.md, "the anatomy of one op"), which does nothing
// outside a region. f32 leaf weights are cast once per outermost region (the weight-cast cache)
// and casts are differentiable, so an f32 weight receives an f32 gradient.
#pragma once
#include <array>
#include <span>
#include <string_view>
#include <vector>

#include "amp/policy.h"
#include "core/tensor.h"

namespace hg::amp {

bool is_enabled();        // inside an enabled Autocast region on this thread (and not in a backward it surrounds)
DType autocast_dtype();   // the lower dtype of the innermost region (f16 outside any)

class Autocast {
 public:
  explicit Autocast(DType dtype = f16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
  int previous_backward_depth_;
};

namespace detail {
bool active();  // autocast on, or a PrecisionReport recording: prepare has work to do
void prepare_inputs(Op op, std::span<Tensor> inputs);                // a built-in op
void prepare_inputs(std::string_view op, std::span<Tensor> inputs);  // a custom op, by its name
// The same with the policy given rather than looked up: a custom op that declares
// `static constexpr CastPolicy policy` on its type (ops/function.h).
void prepare_inputs(std::string_view op, std::span<Tensor> inputs, CastPolicy policy);
// A custom op's declared cast_inputs: casts its floating inputs to `dtype` (autocast is on) and
// records the row ("cast_inputs" policy) in an active PrecisionReport.
void cast_inputs(std::string_view op, std::span<Tensor> inputs, DType dtype);
size_t cache_size();  // entries in this thread's weight-cast cache (for tests)

// amp::ShadowCheck's view of prepare (amp_tools/shadow_check.cpp): it sees each op's floating inputs as
// they arrive and may replace them (the f32 re-run feeds every op the inputs of its autocast
// run), then sees them as the op will compute with them. While one is installed, prepare runs
// even outside autocast.
class PrepareObserver {
 public:
  virtual ~PrepareObserver() = default;
  virtual void arrived(std::string_view op, std::span<Tensor> inputs) = 0;
  virtual void prepared(std::string_view op, std::span<const Tensor> inputs) = 0;
};
PrepareObserver* set_prepare_observer(PrepareObserver* observer);  // returns the previous one
}  // namespace detail

// The first step of every op: returns the inputs cast by `op`'s policy (undefined tensors pass through).
template <class... Ts>
std::array<Tensor, sizeof...(Ts)> prepare(Op op, const Ts&... inputs) {
  std::array<Tensor, sizeof...(Ts)> prepared{inputs...};
  if (detail::active()) detail::prepare_inputs(op, prepared);
  return prepared;
}

inline std::vector<Tensor> prepare_all(Op op, std::vector<Tensor> inputs) {
  if (detail::active()) detail::prepare_inputs(op, inputs);
  return inputs;
}

// A custom op (autograd::Function) is not in the op table: it is keyed by its name, and its
// policy is whatever amp::set_policy gave that name.
inline std::vector<Tensor> prepare_all(std::string_view custom_op, std::vector<Tensor> inputs) {
  if (detail::active()) detail::prepare_inputs(custom_op, inputs);
  return inputs;
}
// ... or by the policy its type declares.
inline std::vector<Tensor> prepare_all(std::string_view custom_op, std::vector<Tensor> inputs, CastPolicy policy) {
  if (detail::active()) detail::prepare_inputs(custom_op, inputs, policy);
  return inputs;
}

}  // namespace hg::amp
