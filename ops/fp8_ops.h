// The FP8 versions of linear, matmul and conv2d: what those ops run inside an enabled
// amp::Fp8Autocast (amp/fp8.h's recipes; ops/fp8_ops.cpp), and what amp::ShadowCheck sees of them.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/tensor.h"

namespace hg::amp::detail {
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu);
Tensor fp8_matmul(const Tensor& a, const Tensor& b);
Tensor fp8_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                  int64_t dilation, int64_t groups, bool relu);

// amp::ShadowCheck's view of the FP8 ops (amp_tools/shadow_check.cpp): after each one, its name,
// its inputs as they arrived, unquantised -- (x, w, b) for linear and conv2d, (a, b) for matmul:
// what the plain op's amp::prepare sees -- its result, and the scales its two operands were
// multiplied by (NaN where the recipe scaled per tile). The ops an FP8 op is made of are its own:
// no observer (amp::detail::PrepareObserver, autograd::OutputObserver) sees them.
class Fp8OpObserver {
 public:
  virtual ~Fp8OpObserver() = default;
  virtual void fp8_op(std::string_view op, std::span<const Tensor> inputs, const Tensor& output, float input_scale,
                      float weight_scale) = 0;
};
Fp8OpObserver* set_fp8_op_observer(Fp8OpObserver* observer);  // returns the previous one

// Installs the three observers on this thread for a scope and restores the ones before: ShadowCheck's
// recorder; nullptr, nullptr, nullptr around the ops an FP8 op is made of.
class Observing {
 public:
  Observing(PrepareObserver* prepare, autograd::OutputObserver* output, Fp8OpObserver* fp8);
  ~Observing();
  Observing(const Observing&) = delete;
  Observing& operator=(const Observing&) = delete;

 private:
  PrepareObserver* previous_prepare_;
  autograd::OutputObserver* previous_output_;
  Fp8OpObserver* previous_fp8_;
};
}  // namespace hg::amp::detail
