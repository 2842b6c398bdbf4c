// for_each_element: the fused update loop of the optimizers. It walks a parameter (or its f32
// master), its gradient and its state tensors -- all contiguous, same dtype T -- element by
// element in parallel, handing the update rule the values in the compute type Acc<T> by reference
// and writing them back. One pass over memory per step, no temporary tensors.
#pragma once
#include <array>

#include "core/parallel.h"
#include "core/tensor.h"

namespace hg::optim::detail {

template <size_t N, class Rule>
void for_each_element(const std::array<Tensor, N>& tensors, const Rule& rule) {
  for (const Tensor& t : tensors)
    HG_CHECK(t.is_contiguous() && t.dtype() == tensors[0].dtype() && t.numel() == tensors[0].numel() &&
                 t.device().is_cpu(), "optimizer: internal error: update operands must be contiguous CPU tensors of one dtype");
  visit_floating(tensors[0].dtype(), "optimizer", [&]<class T> {
    std::array<T*, N> data;
    for (size_t k = 0; k < N; ++k) data[k] = static_cast<T*>(tensors[k].raw_data());
    parallel_for(0, tensors[0].numel(), 16384, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        std::array<Acc<T>, N> v;
        for (size_t k = 0; k < N; ++k) v[k] = Acc<T>(data[k][i]);
        rule(v);
        for (size_t k = 0; k < N; ++k) data[k][i] = T(v[k]);
      }
    });
  });
}

}  // namespace hg::optim::detail
