// The optimizers' per-element update rules, the one definition both the CPU loop (optim/sgd.cpp,
// optim/adam.cpp through kernels/cpu/optimizer_loop.h) and the CUDA multi-tensor kernels
// (kernels/cuda/optim.cu) call. A is the compute type (f32 for 16-bit and f32 weights, f64 for f64).
// The rules are PyTorch's (torch.optim.SGD / Adam / AdamW / RMSprop / Adagrad / Adadelta,
// non-foreach, non-fused).
//
// RMSprop, Adagrad and Adadelta share one shape, which one generic loop on each device runs:
// `constants(t)` once per parameter and step (t = 1, 2, ...), then `apply(w, g, s0, s1, s2, k)`
// per element on the weight, the gradient and up to three state values (states() says which
// the rule keeps; the others are scratch).
#pragma once
#include "kernels/math/common.h"

namespace hg::kernels::math {

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;

  // One element: weight w, gradient g, momentum buffer (unused without momentum). `first`: the
  // buffer holds no value yet, so this step makes it the gradient (PyTorch's rule).
  template <class A>
  HG_HD void apply(A& w, A g, A& buffer, bool first) const {
    A d = g + A(weight_decay) * w;
    if (momentum != 0) {
      buffer = first ? d : A(momentum) * buffer + A(1 - dampening) * d;
      d = nesterov ? d + A(momentum) * buffer : buffer;
    }
    w -= A(lr) * d;
  }
};

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: the weight decays by lr * weight_decay instead of joining the gradient

  // The bias corrections of update number t (1, 2, ...): computed once per parameter, not per
  // element (two pow calls per element would cost more than the update).
  struct Factors {
    double step_size, bias_correction2_sqrt;
  };
  HG_HD Factors factors(double t) const {
    using std::pow, std::sqrt;  // (on the device the unqualified calls find CUDA's)
    return {lr / (1 - pow(beta1, t)), sqrt(1 - pow(beta2, t))};
  }

  // One element: weight w, gradient g, first and second moments m and v.
  template <class A>
  HG_HD void apply(A& w, A g, A& m, A& v, Factors f) const {
    using std::sqrt;
    if (decoupled) w *= A(1 - lr * weight_decay);
    else if (weight_decay != 0) g += A(weight_decay) * w;
    m = m * A(beta1) + g * A(1 - beta1);
    v = v * A(beta2) + A(1 - beta2) * g * g;
    const A denom = sqrt(v) / A(f.bias_correction2_sqrt) + A(eps);
    w += A(-f.step_size) * (m / denom);
  }
};

struct NoConstants {};

struct RmspropStep {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered;

  // States: s0 square_avg, s1 momentum_buffer (momentum > 0), s2 grad_avg (centered).
  HG_HD NoConstants constants(double) const { return {}; }
  template <class A>
  HG_HD void apply(A& w, A g, A& square_avg, A& buffer, A& grad_avg, NoConstants) const {
    using std::sqrt;
    if (weight_decay != 0) g += A(weight_decay) * w;
    square_avg = square_avg * A(alpha) + A(1 - alpha) * g * g;
    A avg;
    if (centered) {
      grad_avg = grad_avg * A(alpha) + A(1 - alpha) * g;
      avg = sqrt(square_avg - grad_avg * grad_avg) + A(eps);
    } else {
      avg = sqrt(square_avg) + A(eps);
    }
    if (momentum > 0) {
      buffer = buffer * A(momentum) + g / avg;
      w -= A(lr) * buffer;
    } else {
      w -= A(lr) * (g / avg);
    }
  }
};

struct AdagradStep {
  double lr, lr_decay, weight_decay, eps;

  // States: s0 sum (of squared gradients; it starts at initial_accumulator_value).
  struct Constants {
    double clr;  // the decayed learning rate of update t
  };
  HG_HD Constants constants(double t) const { return {lr / (1 + (t - 1) * lr_decay)}; }
  template <class A>
  HG_HD void apply(A& w, A g, A& sum, A&, A&, Constants k) const {
    using std::sqrt;
    if (weight_decay != 0) g += A(weight_decay) * w;
    sum += g * g;
    w -= A(k.clr) * (g / (sqrt(sum) + A(eps)));
  }
};

struct AdadeltaStep {
  double lr, rho, eps, weight_decay;

  // States: s0 square_avg, s1 acc_delta.
  HG_HD NoConstants constants(double) const { return {}; }
  template <class A>
  HG_HD void apply(A& w, A g, A& square_avg, A& acc_delta, A&, NoConstants) const {
    using std::sqrt;
    if (weight_decay != 0) g += A(weight_decay) * w;
    square_avg = square_avg * A(rho) + A(1 - rho) * g * g;
    const A delta = sqrt(acc_delta + A(eps)) / sqrt(square_avg + A(eps)) * g;
    acc_delta = acc_delta * A(rho) + A(1 - rho) * delta * delta;
    w -= A(lr) * delta;
  }
};

}  // namespace hg::kernels::math
