// Activations. Each is its formula in kernels/math/activation.h run by the elementwise kernel, and a
// backward that runs the formula's derivative the same way (from the saved input, or from the
// saved output where that is cheaper: sigmoid, tanh).
#include "ops/activation.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "ops/elementwise_kernel.h"
#include "kernels/math/activation.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

namespace {

// An activation whose backward needs its input x.
template <class Op>
Tensor activation_from_input(const char* name, const Tensor& input) {
  auto [x] = amp::prepare(name, input);
  HG_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype());
  Tensor out = detail::map_to_new<1>(x.shape(), {x}, math::Forward<Op>{});
  record(name, out, {x}, [sx = SavedTensor(x, name)](const Tensor& g) -> std::vector<Tensor> {
    const Tensor x = sx.get();
    return {detail::map_to_new<2>(x.shape(), {x, g}, math::BackwardFromInput<Op>{})};
  });
  return out;
}

// An activation whose backward is cheapest from its output y.
template <class Op>
Tensor activation_from_output(const char* name, const Tensor& input) {
  auto [x] = amp::prepare(name, input);
  HG_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype());
  Tensor out = detail::map_to_new<1>(x.shape(), {x}, math::Forward<Op>{});
  record(name, out, {x}, [sy = SavedTensor(out, name)](const Tensor& g) -> std::vector<Tensor> {
    const Tensor y = sy.get();
    return {detail::map_to_new<2>(y.shape(), {y, g}, math::BackwardFromOutput<Op>{})};
  });
  return out;
}

}  // namespace

// ---- the ops ------------------------------------------------------------------------------------

Tensor relu(const Tensor& x) { return activation_from_input<math::Relu>("relu", x); }
Tensor gelu(const Tensor& x) { return activation_from_input<math::Gelu>("gelu", x); }
Tensor silu(const Tensor& x) { return activation_from_input<math::Silu>("silu", x); }
Tensor sigmoid(const Tensor& x) { return activation_from_output<math::Sigmoid>("sigmoid", x); }
Tensor tanh(const Tensor& x) { return activation_from_output<math::Tanh>("tanh", x); }

}  // namespace hg
