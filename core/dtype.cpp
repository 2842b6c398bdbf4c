// Type promotion and printing, from the dtype table in dtype.h.
#include "core/dtype.h"

#include <ostream>

namespace hg {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ra = dtype_info(a).promotion_rank, rb = dtype_info(b).promotion_rank;
  if (ra == rb) return DType::F32;  // f16 with bf16: neither holds the other's values
  return ra > rb ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

}  // namespace hg
