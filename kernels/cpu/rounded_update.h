// for_each_element_rounded: the optimizers' update loop for pure 16-bit training (bf16 or f16
// weights and state, no f32 master): like for_each_element (optimizer_loop.h) it hands the rule
// the weight, the gradient and the state in f32, but writes them back with
//   Stochastic: the weight and every state tensor stochastically rounded (kernels/math/
//               stochastic_round.h), so updates below half an ulp survive on average;
//   Kahan:      the weight rounded to nearest with a compensation tensor (16-bit, one per
//               weight element) that carries what the rounding lost into the next step
//               (w + (update + c) rounded, c = what did not fit); the state stochastically.
// NOTE: the state is rounded stochastically in both modes: Adam's second moment moves by
// (1 - beta2) = 0.1% per step, below bf16's half ulp of 0.39%, and would stall with nearest rounding.
//
// Random bits: element i takes words 2 (i % 2) and 2 (i % 2) + 1 of the Philox block offset + i / 2,
// four 16-bit halves: the weight's (half 0) and one per state tensor (halves 1, 2, 3). A parameter
// of n elements uses ceil(n / 2) counters (rounding_counters(n)); the same bits for any thread count.
#pragma once
#include <algorithm>
#include <array>

#include "core/loops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "kernels/math/stochastic_round.h"

namespace hg::kernels::cpu {

struct RoundedStore {
  bool kahan = false;
  Tensor compensation;  // Kahan: the weight's compensation, same dtype and size
  uint64_t seed = 0, offset = 0;
};

inline constexpr uint64_t rounding_counters(int64_t numel) { return (uint64_t(numel) + 1) / 2; }

template <class T, size_t N, class Rule>
void rounded_range(int64_t lo, int64_t hi, int64_t n, const Rule& rule, const RoundedStore& store,
                   const std::array<T*, N>& data, T* compensation) {
  static_assert(N >= 2 && N <= 5, "a weight, a gradient and up to three state tensors");
  constexpr int64_t kGroup = 2 * philox::kBatch;  // elements per batch of blocks
  uint32_t words[4][philox::kBatch];
  for (int64_t group = lo; group < hi; ++group) {
    philox::generate_batch(store.seed, store.offset + uint64_t(group * philox::kBatch), words);
    const int64_t first = group * kGroup, m = std::min(kGroup, n - first);
    for (int64_t k = 0; k < m; ++k) {
      const int64_t i = first + k;
      const uint32_t a = words[2 * (k % 2)][k / 2], b = words[2 * (k % 2) + 1][k / 2];
      const uint32_t halves[4] = {a & 0xffffu, a >> 16, b & 0xffffu, b >> 16};
      std::array<float, N> v;
      for (size_t j = 0; j < N; ++j) v[j] = float(data[j][i]);
      const float w_old = v[0];
      rule(v);
      for (size_t j = 2; j < N; ++j) data[j][i] = math::stochastic_round_to<T>(v[j], halves[j - 1]);
      if (!store.kahan) {
        data[0][i] = math::stochastic_round_to<T>(v[0], halves[0]);
        continue;
      }
      // NOTE: (rounded - w_old) is exact in f32 (two nearby 16-bit values); what is left of y is
      // below half an ulp of the weight, kept in 16 bits to 8 (bf16) or 11 (f16) bits of itself.
      const float y = (v[0] - w_old) + float(compensation[i]);
      const T rounded(w_old + y);
      compensation[i] = T(y - (float(rounded) - w_old));
      data[0][i] = rounded;
    }
  }
}

// tensors: {weight, gradient, state...}, contiguous CPU bf16 or f16 tensors of one size.
template <size_t N, class Rule>
void for_each_element_rounded(const std::array<Tensor, N>& tensors, const Rule& rule, const RoundedStore& store) {
  const Tensor& w = tensors[0];
  for (const Tensor& t : tensors)
    HG_CHECK(t.is_contiguous() && t.dtype() == w.dtype() && t.numel() == w.numel() && t.device().is_cpu(),
             "optimizer: internal error: rounded update operands must be contiguous CPU tensors of one dtype");
  HG_CHECK(w.dtype() == bf16 || w.dtype() == f16, "optimizer: stochastic rounding and Kahan summation keep bf16 or f16 "
           "weights, got ", w.dtype());
  HG_CHECK(!store.kahan || (store.compensation.defined() && store.compensation.dtype() == w.dtype() &&
                            store.compensation.numel() == w.numel() && store.compensation.is_contiguous()),
           "optimizer: internal error: Kahan summation needs a compensation tensor like the weight");
  const int64_t n = w.numel();
  const int64_t groups = (n + 2 * philox::kBatch - 1) / (2 * philox::kBatch);
  const auto run = [&]<class T> {
    std::array<T*, N> data;
    for (size_t j = 0; j < N; ++j) data[j] = static_cast<T*>(tensors[j].raw_data());
    T* compensation = store.kahan ? static_cast<T*>(store.compensation.raw_data()) : nullptr;
    parallel_for(0, groups, 256, [&](int64_t lo, int64_t hi) { rounded_range<T, N>(lo, hi, n, rule, store, data, compensation); });
  };
  if (w.dtype() == bf16) run.template operator()<bfloat16>();
  else run.template operator()<half>();
}

}  // namespace hg::kernels::cpu
