// Lesson 7: a custom op under autocast -- giving it a cast policy.
//
// Autocast decides each op's precision from a policy (lesson 4 printed what it did). A custom
// hg::autograd::Function says what it needs on its own type, in one of two ways:
//   - static constexpr hg::amp::CastPolicy policy = hg::amp::CastPolicy::F32; like a built-in op:
//     its inputs are cast to f32; inside forward autocast stays on, so the ops it is made of
//     still follow their own policies. The op shows in PrecisionReport and policy_table().
//   - static constexpr hg::DType cast_inputs = hg::f32; (PyTorch's custom_fwd): the inputs are
//     cast, and forward and backward run with autocast off -- exactly in f32.
// An op that declares neither is looked up in the runtime table (hg::amp::set_policy), and
// halfgrad does not guess: without an entry, running it under autocast is an hg::Error.
// The op: ScaledSoftplus(x, beta) = log(1 + exp(beta x)) / beta (PyTorch's Softplus(beta)).
// NOTE: exp(beta x) passes f16's maximum, 65504, once beta x > 11.09. That is the range it needs.
#include <cmath>
#include <iomanip>
#include <iostream>
#include <vector>

#include "halfgrad.h"

namespace {

// The math, shared by the three variants below.
struct SoftplusMath {
  static hg::Tensor forward(hg::autograd::Context& ctx, const hg::Tensor& x, double beta) {
    ctx.save_for_backward({x});
    ctx.save("beta", beta);  // non-tensor values for backward keep their type
    return hg::log(hg::exp(x * beta) + 1.0) / beta;
  }
  // d/dx log(1 + exp(beta x)) / beta = exp(beta x) / (1 + exp(beta x)) = sigmoid(beta x).
  static std::vector<hg::Tensor> backward(hg::autograd::Context& ctx, std::vector<hg::Tensor> grad_outputs) {
    const hg::Tensor x = ctx.saved()[0];
    return {grad_outputs[0] * hg::sigmoid(x * ctx.get<double>("beta"))};
  }
};

// The recommended form: the precision the op needs is part of its type.
struct ScaledSoftplus : SoftplusMath, hg::autograd::Function<ScaledSoftplus> {
  static constexpr const char* name = "scaled_softplus";  // required: the graph, errors, the AMP table
  static constexpr hg::amp::CastPolicy policy = hg::amp::CastPolicy::F32;
};

// The same op declaring its own input dtype instead (autocast off inside).
struct ScaledSoftplusF32 : SoftplusMath, hg::autograd::Function<ScaledSoftplusF32> {
  static constexpr const char* name = "scaled_softplus_f32";
  static constexpr hg::DType cast_inputs = hg::f32;  // cast floating inputs to f32, autocast off inside
};

// ... and declaring nothing: it needs an entry in the runtime table.
struct ScaledSoftplusUntyped : SoftplusMath, hg::autograd::Function<ScaledSoftplusUntyped> {
  static constexpr const char* name = "scaled_softplus_untyped";
};

// Prints the rows of a PrecisionReport compactly: op, policy, compute dtype.
void print_ops(const hg::amp::PrecisionReport& report) {
  for (const auto& row : report.rows())
    std::cout << "     " << std::left << std::setw(20) << row.op << std::setw(12) << row.policy << "computed in "
              << row.compute << std::right << "\n";
}

constexpr double kBeta = 4.0;

// 1. Why the op needs f32: in pure f16 (no autocast) exp(4 * 3) = 162755 is already inf.
bool show_f16_overflow() {
  const hg::Tensor x = hg::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  const std::vector<float> in_f32 = ScaledSoftplus::apply(x, kBeta).to_vector<float>();
  const std::vector<float> in_f16 = ScaledSoftplus::apply(x.to(hg::f16), kBeta).to_vector<float>();
  std::cout << std::setprecision(8) << "1. scaled_softplus(x, beta = 4) without autocast\n   x:   ";
  for (float v : x.to_vector<float>()) std::cout << std::setw(12) << v;
  std::cout << "\n   f32: ";
  for (float v : in_f32) std::cout << std::setw(12) << v;
  std::cout << "\n   f16: ";
  for (float v : in_f16) std::cout << std::setw(12) << v;
  std::cout << "\n   (exp(beta x) overflows f16 from beta x = 11.09 on: the f16 answer is inf)\n\n";
  return std::isinf(in_f16[3]) && std::fabs(in_f32[3] - 4.0f) < 1e-4f;
}

// A small layer in front of the op, so that it receives what autocast produces: an f16 activation.
struct Layer {
  hg::Tensor input;  // (1, 4) f32 leaf
  hg::Tensor w;      // (4, 4) f32 weight
};

// 2. An op that declares no policy, under autocast: an error that says what to do; then the
// runtime table's entry makes it run.
bool show_missing_policy(const Layer& layer) {
  std::cout << "2. under Autocast(f16), an op that declares no policy and has no table entry:\n";
  bool refused = false;
  try {
    hg::amp::Autocast autocast(hg::f16);
    ScaledSoftplusUntyped::apply(hg::linear(layer.input, layer.w), kBeta);
  } catch (const hg::Error& e) {
    std::cout << "   hg::Error: " << e.what() << "\n";
    refused = true;
  }
  hg::amp::set_policy("scaled_softplus_untyped", hg::amp::CastPolicy::F32);
  hg::amp::Autocast autocast(hg::f16);
  const hg::Tensor y = ScaledSoftplusUntyped::apply(hg::linear(layer.input, layer.w), kBeta);
  std::cout << "   after hg::amp::set_policy(\"scaled_softplus_untyped\", CastPolicy::F32) it runs, output "
            << y.dtype() << "\n\n";
  return refused && y.dtype() == hg::f32;
}

// 3. The policy on the type (F32): the linear runs in f16, the op in f32, gradients flow back.
bool show_f32_policy(const Layer& layer, hg::Tensor& y) {
  std::cout << "3. ScaledSoftplus (static constexpr hg::amp::CastPolicy policy = CastPolicy::F32):\n";
  hg::Tensor h;
  {
    hg::amp::PrecisionReport report;
    hg::amp::Autocast autocast(hg::f16);
    h = hg::linear(layer.input, layer.w);  // (1, 4) f16: the Lower policy
    y = ScaledSoftplus::apply(h, kBeta);
    std::cout << "   linear output " << h.dtype() << ", scaled_softplus output " << y.dtype()
              << "; what ran, in order:\n";
    print_ops(report);
  }
  std::cout << "   policy_table() now lists it: scaled_softplus -> "
            << hg::amp::policy_name(hg::amp::policy("scaled_softplus")) << "\n";
  hg::sum(y).backward();
  bool finite = true;
  for (float g : layer.w.grad().to_vector<float>()) finite = finite && std::isfinite(g);
  std::cout << "   backward: input.grad " << layer.input.grad().dtype() << ", w.grad " << layer.w.grad().dtype()
            << ", all finite: " << std::boolalpha << finite << "\n\n";
  return h.dtype() == hg::f16 && y.dtype() == hg::f32 && finite && layer.w.grad().dtype() == hg::f32;
}

// 4. cast_inputs = f32: no table entry needed, and the ops inside run with autocast off.
bool show_cast_inputs(const Layer& layer, const hg::Tensor& y_policy) {
  std::cout << "4. ScaledSoftplusF32 (static constexpr hg::DType cast_inputs = hg::f32):\n";
  hg::Tensor y;
  {
    hg::amp::PrecisionReport report;
    hg::amp::Autocast autocast(hg::f16);
    y = ScaledSoftplusF32::apply(hg::linear(layer.input, layer.w), kBeta);
    std::cout << "   output " << y.dtype() << "; what ran (\"off\": autocast was off inside forward):\n";
    print_ops(report);
  }
  const double difference = hg::amax(hg::abs(y - y_policy).flatten(), 0).item<double>();
  std::cout << "   max |difference| from the F32-policy version: " << difference << "\n\n";
  return y.dtype() == hg::f32 && difference == 0.0;
}

// 5. The backward is a claim: check both variants against finite differences in f64 (autocast
// never touches f64 tensors). x spans the range where beta x reaches into the 20s.
bool show_gradcheck() {
  hg::manual_seed(8);
  const std::vector<hg::Tensor> inputs{(hg::randn({3, 5}, {.dtype = hg::f64}) * 3.0).requires_grad_()};
  const auto check = [&](auto op) {
    return hg::autograd::gradcheck_report([&](const std::vector<hg::Tensor>& in) { return op(in[0]); }, inputs,
                                          {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3});
  };
  const auto policy_version = check([](const hg::Tensor& t) { return ScaledSoftplus::apply(t, kBeta); });
  const auto cast_inputs_version = check([](const hg::Tensor& t) { return ScaledSoftplusF32::apply(t, kBeta); });
  std::cout << "5. gradcheck in f64, input (3, 5) in about [-9, 9]: scaled_softplus "
            << (policy_version ? *policy_version : "ok") << ", scaled_softplus_f32 "
            << (cast_inputs_version ? *cast_inputs_version : "ok") << "\n";
  return !policy_version && !cast_inputs_version;
}

}  // namespace

int main() {
  bool ok = show_f16_overflow();
  hg::manual_seed(7);
  const Layer layer{(hg::from_vector(std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}, {1, 4})).requires_grad_(),
                    hg::randn({4, 4}, {.requires_grad = true})};
  ok = show_missing_policy(layer) && ok;
  hg::Tensor y_policy;
  ok = show_f32_policy(layer, y_policy) && ok;
  ok = show_cast_inputs(layer, y_policy) && ok;
  ok = show_gradcheck() && ok;
  std::cout << (ok ? "custom_op_amp: all checks passed\n" : "custom_op_amp: CHECK FAILED\n");
  return ok ? 0 : 1;
}
