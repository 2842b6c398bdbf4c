// Must NOT compile: a custom op without `name`. CTest (autograd.function.missing_name_is_a_compile_error)
// compiles this file and passes when the compiler prints Function<T>'s static_assert, which says
// what to add.
#include "ops/function.h"

struct Nameless : hg::autograd::Function<Nameless> {
  static hg::Tensor forward(hg::autograd::Context&, const hg::Tensor& x) { return x; }
  static std::vector<hg::Tensor> backward(hg::autograd::Context&, std::vector<hg::Tensor> g) { return g; }
};

hg::Tensor use(const hg::Tensor& x) { return Nameless::apply(x); }
