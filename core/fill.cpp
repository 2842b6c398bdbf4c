#include "core/fill.h"

#include <cstdint>
#include <cstring>

#include "core/convert.h"
#include "core/copy.h"

namespace hg::detail {

void fill(const Tensor& t, double value) {
  if (t.device().is_cuda()) {
    // The value travels as a kernel argument (its bytes in the tensor's dtype), not through a
    // host->device copy: a copy from host memory would wait for every kernel queued before it.
    uint64_t bits = 0;
    visit_any_dtype(t.dtype(), [&]<class T> {
      const T converted = convert_value<T>(value);
      std::memcpy(&bits, &converted, sizeof(T));
    });
    cuda_fill(t, bits);
    return;
  }
  // A 0-d tensor holding the value, broadcast by copy_into (which also handles strided views).
  Tensor scalar = empty({}, {.dtype = t.dtype()});
  visit_any_dtype(t.dtype(), [&]<class T> { *scalar.data_ptr<T>() = convert_value<T>(value); });
  copy_into(t, scalar);
}

}  // namespace hg::detail
