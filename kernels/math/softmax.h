// The formulas of softmax and log_softmax along one line of D values, the one definition the CPU
// loops (ops/softmax.cpp) and the CUDA kernels (kernels/cuda/softmax.cu) both run; the drivers only
// decide who walks the line (a CPU thread, a CUDA thread or a warp) and how partial results meet.
//
//   forward, three passes:  max = nan_max over x          (so exp() <= 1: logits of +-1e4 never overflow)
//                           total = sum exp(x - max)
//                           y = exp(x - max) / total      or, log: (x - max) - log(total)
//   backward from y:        total = sum g * y             or, log: sum g
//                           dx = y * (g - total)          or, log: g - exp(y) * total
#pragma once
#include "kernels/math/reduce.h"

namespace hg::kernels::math {

struct Softmax {
  bool log;  // log_softmax

  template <class A> HG_HD static A exp_term(A x, A max) { return std::exp(x - max); }
  template <class A> HG_HD static A log_of(A total) { return std::log(total); }
  template <class A> HG_HD A output(A x, A max, A total, A log_total) const {
    const A shifted = x - max;
    return log ? shifted - log_total : std::exp(shifted) / total;
  }

  template <class A> HG_HD A grad_term(A g, A y) const { return log ? g : g * y; }
  template <class A> HG_HD A grad(A g, A y, A total) const { return log ? g - std::exp(y) * total : y * (g - total); }
};

}  // namespace hg::kernels::math
