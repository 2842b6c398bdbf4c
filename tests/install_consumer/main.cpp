// Uses the installed headers and library: prints "consumer ok <sum>" on success.
#include <halfgrad/halfgrad.h>

#include <iostream>

int main() {
  hg::Tensor a = hg::ones({2, 3});
  hg::Tensor b = hg::full({3}, 2.0);
  hg::Tensor c = (a * b).to(hg::f16);
  std::cout << "consumer ok " << hg::sum(c.to(hg::f32)).item<float>() << "\n";
  return 0;
}
