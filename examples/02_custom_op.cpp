// Lesson 2: custom differentiable ops with hand-written backwards, and how to trust them.
//
// Mish(x) = x * tanh(softplus(x)), softplus(x) = log(1 + exp(x)). Composed from hg ops it already
// has a gradient: autograd records exp, add, log, tanh and mul and chains their backwards. Writing
// it as hg::autograd::Function<Mish> instead saves fewer tensors and lets us pick a formula for
// the derivative that stays finite where the chain rule through exp overflows (see step 3).
// A hand-written backward is a claim, so we check it twice: against finite differences
// (gradcheck, in f64) and against autograd's own gradient of the composed version.
// Step 4 writes an op with two outputs, var_mean (torch.var_mean): one forward, one backward
// that receives a gradient for each output.
#include <cmath>
#include <iostream>
#include <tuple>

#include "halfgrad.h"

namespace {

// softplus(x) = log(1 + exp(x)), composed from ops (halfgrad has it built in too, hg::softplus,
// with PyTorch's threshold; this lesson builds it to show composing).
// NOTE: exp overflows to inf for x > ~88 in f32. The forward survives (log(inf) = inf and
// tanh(inf) = 1), but the chain rule through it multiplies 0 by inf.
// NOTE: not named `softplus`: a call softplus(x) with an hg::Tensor argument also finds
// hg::softplus by argument-dependent lookup, and the two would be ambiguous.
hg::Tensor softplus_from_ops(const hg::Tensor& x) { return hg::log(hg::exp(x) + 1.0); }

// The reference: Mish from ops; autograd derives its gradient.
hg::Tensor mish_composed(const hg::Tensor& x) { return x * hg::tanh(softplus_from_ops(x)); }

struct Mish : hg::autograd::Function<Mish> {
  static constexpr const char* name = "mish";  // names the op in the graph, errors and the AMP table

  // Runs with grad mode off: nothing inside is recorded; apply() connects the result to the graph.
  static hg::Tensor forward(hg::autograd::Context& ctx, const hg::Tensor& x) {
    const hg::Tensor t = hg::tanh(softplus_from_ops(x));
    ctx.save_for_backward({x, t});  // t is reused by backward, so keep it rather than recompute it
    return x * t;
  }

  // d/dx [x * t(x)] = t + x * (1 - t^2) * sigmoid(x), because d softplus/dx = sigmoid(x) and
  // d tanh(s)/ds = 1 - tanh(s)^2. Every factor here is bounded, so no inf ever enters.
  static std::vector<hg::Tensor> backward(hg::autograd::Context& ctx, std::vector<hg::Tensor> grad_outputs) {
    const std::vector<hg::Tensor> saved = ctx.saved();  // throws if x or t was modified in place
    const hg::Tensor& x = saved[0];
    const hg::Tensor& t = saved[1];
    const hg::Tensor derivative = t + x * (1.0 - t * t) * hg::sigmoid(x);
    return {grad_outputs[0] * derivative};  // one gradient per tensor argument of forward
  }
};

// Variance (biased) and mean of each row of x (rows, n), both (rows): two outputs of one op.
// forward returns a std::tuple (a std::vector or std::array works too); apply returns the same.
struct VarMean : hg::autograd::Function<VarMean> {
  static constexpr const char* name = "var_mean";

  static std::tuple<hg::Tensor, hg::Tensor> forward(hg::autograd::Context& ctx, const hg::Tensor& x) {
    const hg::Tensor mean = hg::mean(x, {1}, /*keepdim=*/true);  // (rows, 1)
    const hg::Tensor centered = x - mean;                          // (rows, n)
    ctx.save_for_backward({centered});
    ctx.save("n", x.size(1));  // a typed value: backward reads it back as an int64_t
    return {hg::mean(centered * centered, {1}), hg::squeeze(mean, 1)};
  }

  // grad_outputs = {d loss/d var, d loss/d mean}, each (rows); an output the loss did not use
  // arrives as zeros. d var/dx_j = 2 (x_j - mean) / n (the path through the mean sums to 0) and
  // d mean/dx_j = 1 / n.
  static std::vector<hg::Tensor> backward(hg::autograd::Context& ctx, std::vector<hg::Tensor> grad_outputs) {
    const hg::Tensor centered = ctx.saved()[0];
    const double n = double(ctx.get<int64_t>("n"));
    const hg::Tensor g_var = hg::unsqueeze(grad_outputs[0], 1), g_mean = hg::unsqueeze(grad_outputs[1], 1);
    return {g_var * centered * (2.0 / n) + g_mean / n};
  }
};

// The largest |a - b| over two tensors of the same shape, in f64.
double max_abs_diff(const hg::Tensor& a, const hg::Tensor& b) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = 0.0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::fabs(va[i] - vb[i]));
  return worst;
}

}  // namespace

int main() {
  hg::manual_seed(0);
  bool ok = true;

  // 1. Finite differences: in f64, where (f(x+eps) - f(x-eps)) / 2eps is accurate to ~1e-10.
  const std::vector<hg::Tensor> inputs{hg::randn({4, 5}, {.dtype = hg::f64, .requires_grad = true})};
  const auto mismatch =
      hg::autograd::gradcheck_report([](const std::vector<hg::Tensor>& in) { return Mish::apply(in[0]); }, inputs,
                                     {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3});
  std::cout << "gradcheck of mish, f64 input of shape (4, 5): " << (mismatch ? *mismatch : "ok") << "\n";
  ok = ok && !mismatch;

  // 2. The same function composed from ops: forward values and gradients must agree.
  hg::Tensor x1 = hg::randn({1000}, {.dtype = hg::f64, .requires_grad = true});
  hg::Tensor x2 = x1.detach().clone().requires_grad_();
  hg::Tensor y1 = Mish::apply(x1);
  hg::Tensor y2 = mish_composed(x2);
  hg::sum(y1).backward();
  hg::sum(y2).backward();
  const double forward_diff = max_abs_diff(y1, y2), grad_diff = max_abs_diff(x1.grad(), x2.grad());
  std::cout << "custom vs composed on 1000 f64 values: max |forward diff| = " << forward_diff
            << ", max |gradient diff| = " << grad_diff << "\n";
  ok = ok && forward_diff <= 1e-12 && grad_diff <= 1e-12;

  // 3. Where the hand-written formula earns its keep: x = 100 in f32, exp(100) = inf.
  hg::Tensor big1 = hg::full({1}, 100.0, {.requires_grad = true});
  hg::Tensor big2 = hg::full({1}, 100.0, {.requires_grad = true});
  hg::sum(Mish::apply(big1)).backward();
  hg::sum(mish_composed(big2)).backward();
  const float custom_grad = big1.grad().item<float>(), composed_grad = big2.grad().item<float>();
  std::cout << "d mish/dx at x = 100 (f32): custom backward " << custom_grad << ", composed from ops "
            << composed_grad << " (the exact value is 1)\n";
  ok = ok && custom_grad == 1.0f;

  // 4. Two outputs: var_mean's gradient through both, by gradcheck and against the composed ops.
  const std::vector<hg::Tensor> rows{hg::randn({3, 6}, {.dtype = hg::f64, .requires_grad = true})};
  const auto var_mean_mismatch = hg::autograd::gradcheck_report(
      [](const std::vector<hg::Tensor>& in) {
        auto [var, mean] = VarMean::apply(in[0]);
        return hg::cat({var, mean * 3.0}, 0);  // every element of both outputs
      },
      rows);
  hg::Tensor r1 = rows[0].detach().clone().requires_grad_(), r2 = rows[0].detach().clone().requires_grad_();
  auto [var, mean] = VarMean::apply(r1);
  hg::sum(var + mean * 3.0).backward();  // one backward call receives both gradients
  const hg::Tensor m2 = hg::mean(r2, {1}, true);
  hg::sum(hg::mean((r2 - m2) * (r2 - m2), {1}) + hg::squeeze(m2, 1) * 3.0).backward();
  const double var_mean_diff = max_abs_diff(r1.grad(), r2.grad());
  std::cout << "var_mean, two outputs: gradcheck " << (var_mean_mismatch ? *var_mean_mismatch : "ok")
            << ", max |gradient diff| vs composed = " << var_mean_diff << "\n";
  ok = ok && !var_mean_mismatch && var_mean_diff <= 1e-12;

  std::cout << (ok ? "custom ops: all checks passed\n" : "custom ops: CHECK FAILED\n");
  return ok ? 0 : 1;
}
