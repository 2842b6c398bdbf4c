// Lesson 1: tensors, dtypes, views and autograd in twenty lines.
//
// A tensor is a handle to an n-d array with a dtype and a device. Ops on tensors that require
// grad record themselves; backward() walks that record in reverse and fills .grad().
#include <iostream>

#include "halfgrad.h"

int main() {
  hg::manual_seed(0);
  hg::Tensor x = hg::randn({2, 3}, {.requires_grad = true});
  hg::Tensor w = hg::full({3}, 0.5, {.requires_grad = true});
  std::cout << "x = " << x << "\n";

  // y = sum((x * w)^2): broadcasting w over the rows of x.
  hg::Tensor y = hg::sum(hg::pow(x * w, 2.0));
  y.backward();
  std::cout << "y = " << y.item<float>() << "\n";
  std::cout << "dy/dx = 2 (x w) w = " << x.grad() << "\n";
  std::cout << "dy/dw = sum over rows of 2 (x w) x = " << w.grad() << "\n";

  // The same values in 16 bits: f16 keeps 11 significant bits, bf16 keeps 8.
  std::cout << "x in f16:  " << x.detach().to(hg::f16) << "\n";
  std::cout << "x in bf16: " << x.detach().to(hg::bf16) << "\n";

  // Views share memory; contiguous() copies.
  hg::Tensor t = x.detach().t();
  std::cout << "x.t() shares storage: " << (t.raw_data() == x.raw_data()) << ", contiguous: " << t.is_contiguous()
            << "\n";
  std::cout << "bytes held by tensors now: " << hg::memory::allocated() << "\n";
  return 0;
}
