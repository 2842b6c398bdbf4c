// for_each_element: the fused update loop of the optimizers. It walks a parameter (or its f32
// master), its gradient and its state tensors -- all contiguous, same dtype T -- element by
// element in parallel, handing the update rule the values in the compute type Acc<T> by reference
// and writing them back. One pass over memory per step, no temporary tensors.
#pragma once
#include <array>
#include <utility>

#include "core/parallel.h"
#include "core/tensor.h"

namespace hg::optim::detail {

// One range of elements. NOTE: the pointers are __restrict (the tensors never overlap), which is
// what lets the compiler vectorise the rule: without it every store might change the next load,
// the loop stayed scalar and the SGD update took 10% of an MLP training step.
template <class T, class Rule, class... Ptr>
void update_range(int64_t lo, int64_t hi, const Rule& rule, Ptr* __restrict... data) {
  for (int64_t i = lo; i < hi; ++i) {
    std::array<Acc<T>, sizeof...(Ptr)> v{Acc<T>(data[i])...};
    rule(v);
    size_t k = 0;
    ((data[i] = T(v[k++])), ...);
  }
}

template <size_t N, class Rule>
void for_each_element(const std::array<Tensor, N>& tensors, const Rule& rule) {
  for (const Tensor& t : tensors)
    HG_CHECK(t.is_contiguous() && t.dtype() == tensors[0].dtype() && t.numel() == tensors[0].numel() &&
                 t.device().is_cpu(), "optimizer: internal error: update operands must be contiguous CPU tensors of one dtype");
  visit_floating(tensors[0].dtype(), "optimizer", [&]<class T> {
    [&]<size_t... K>(std::index_sequence<K...>) {
      parallel_for(0, tensors[0].numel(), 16384, [&](int64_t lo, int64_t hi) {
        update_range<T>(lo, hi, rule, static_cast<T*>(tensors[K].raw_data())...);
      });
    }(std::make_index_sequence<N>());
  });
}

}  // namespace hg::optim::detail
