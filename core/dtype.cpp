// Type promotion and printing, from the dtype table in dtype.h.
#include "core/dtype.h"

#include <ostream>

#include "core/error.h"

namespace hg {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  HG_CHECK(!is_float8(a) && !is_float8(b), "promote_types: ", dtype_name(a), " and ", dtype_name(b),
           " do not promote: an 8-bit float is a storage format; convert it with .to(hg::f32) first");
  const int ra = dtype_info(a).promotion_rank, rb = dtype_info(b).promotion_rank;
  if (ra == rb) return DType::F32;  // f16 with bf16: neither holds the other's values
  return ra > rb ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

}  // namespace hg
