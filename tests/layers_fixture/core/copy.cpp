// A fixture for cmake/check_layers.py: core calling a Tensor method that ops defines (pointing up
// a layer, invisible to the include check). The commented call and the one in a string must not
// count: // t.contiguous()
#include "core/tensor.h"

Tensor dense(const Tensor& t) { return t.contiguous(); }
const char* note = "x.contiguous()";
