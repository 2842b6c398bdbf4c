// for_each_element: the fused update loop of the optimizers on the CPU (the CUDA twin is
// kernels/cuda/optim.cu; both run the rules of kernels/math/optimizer_step.h). It walks a
// parameter (or its f32 master), its gradient and its state tensors -- all contiguous, same dtype
// T -- element by element in parallel, handing the update rule the values in the compute type
// Acc<T> by reference and writing them back. One pass over memory per step, no temporary tensors.
#pragma once
#include <array>
#include <type_traits>
#include <vector>
#include <utility>

#include "core/cpu_features.h"
#include "core/parallel.h"
#include "core/simd_target.h"
#include "core/tensor.h"

namespace hg::kernels::cpu {

// One range of elements. NOTE: three things let the compiler vectorise the rule, and the loop
// stays scalar (the SGD update then took 13% of an MLP training step) without any one of them:
// the pointers are __restrict (the tensors never overlap, so a store cannot change the next load);
// the rule is a local copy (its options are then loop-invariant, and the compiler moves the
// branches on momentum/nesterov/first out of the loop); and the library is built with
// -fno-math-errno (Adam's sqrt has no errno branch).
template <class T, class Rule, class... Ptr>
[[gnu::always_inline]] inline void update_range(int64_t lo, int64_t hi, const Rule& shared_rule,
                                                Ptr* __restrict... data) {
  const Rule rule = shared_rule;
  for (int64_t i = lo; i < hi; ++i) {
    std::array<Acc<T>, sizeof...(Ptr)> v{Acc<T>(data[i])...};
    rule(v);
    size_t k = 0;
    ((data[i] = T(v[k++])), ...);
  }
}

// The same loop compiled for AVX2 (and used on the AVX-512 levels too): update_range is inlined
// into it, so the compiler vectorises it with 256-bit registers and FMA. A portable build's
// baseline (SSE2) version ran the SGD update at half that speed (8% of an MLP step against 4%;
// a native AVX-512 build: 3.8%). Reached only through the CPU level in use (cpu::supports()).
#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)
template <class T, class Rule, class... Ptr>
void update_range_avx2(int64_t lo, int64_t hi, const Rule& rule, Ptr* __restrict... data) {
  update_range<T>(lo, hi, rule, data...);
}
HG_TARGET_END
#endif

template <size_t N, class Rule>
void for_each_element(const std::array<Tensor, N>& tensors, const Rule& rule) {
  for (const Tensor& t : tensors)
    HG_CHECK(t.is_contiguous() && t.dtype() == tensors[0].dtype() && t.numel() == tensors[0].numel() &&
                 t.device().is_cpu(), "optimizer: internal error: update operands must be contiguous CPU tensors of one dtype");
#if HG_X86
  const bool avx2 = ::hg::cpu::supports(::hg::cpu::Isa::Avx2);
#endif
  visit_floating(tensors[0].dtype(), "optimizer", [&]<class T> {
    [&]<size_t... K>(std::index_sequence<K...>) {
      parallel_for(0, tensors[0].numel(), 16384, [&](int64_t lo, int64_t hi) {
#if HG_X86
        if (avx2) return update_range_avx2<T>(lo, hi, rule, static_cast<T*>(tensors[K].raw_data())...);
#endif
        update_range<T>(lo, hi, rule, static_cast<T*>(tensors[K].raw_data())...);
      });
    }(std::make_index_sequence<N>());
  });
}

// The adaptive optimizers' rules (RMSprop, Adagrad, Adadelta: kernels/math/optimizer_step.h) on
// one parameter: weight, gradient and up to three state slots, an undefined slot being state the
// rule's options do not keep (scratch). t: this parameter's update number (1, 2, ...).
template <class Rule>
void rule_update(const Rule& rule, double t, const Tensor& weight, const Tensor& grad, const std::array<Tensor, 3>& slots) {
  const auto k = rule.constants(t);
  std::array<int, 3> at{-1, -1, -1};  // slot -> its index among the operands (-1: scratch)
  int n = 2;
  for (int s = 0; s < 3; ++s)
    if (slots[size_t(s)].defined()) at[size_t(s)] = n++;
  // One element: the defined slots from the operands, the others zero, the rule, written back.
  const auto apply = [=](auto& v) {
    using A = std::remove_reference_t<decltype(v[0])>;
    A s[3];
    for (int j = 0; j < 3; ++j) s[j] = at[size_t(j)] < 0 ? A(0) : v[size_t(at[size_t(j)])];
    rule.apply(v[0], v[1], s[0], s[1], s[2], k);
    for (int j = 0; j < 3; ++j)
      if (at[size_t(j)] >= 0) v[size_t(at[size_t(j)])] = s[j];
  };
  std::vector<Tensor> defined = {weight, grad};
  for (const Tensor& slot : slots)
    if (slot.defined()) defined.push_back(slot);
  switch (defined.size()) {
    case 3: return for_each_element<3>({defined[0], defined[1], defined[2]}, apply);
    case 4: return for_each_element<4>({defined[0], defined[1], defined[2], defined[3]}, apply);
    case 5: return for_each_element<5>({defined[0], defined[1], defined[2], defined[3], defined[4]}, apply);
    default: HG_FAIL("optimizer: internal error: a rule needs one to three state tensors");
  }
}

}  // namespace hg::kernels::cpu
