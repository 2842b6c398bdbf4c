// Type promotion and printing for the dtype table in dtype.h.
#include "core/dtype.h"

#include <ostream>

namespace hg {

namespace {
// Rank inside a kind: a wider type has a higher rank.
int integer_rank(DType d) { return d == DType::U8 ? 0 : d == DType::I32 ? 1 : 2; }
int floating_rank(DType d) { return d == DType::F64 ? 2 : d == DType::F32 ? 1 : 0; }
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return integer_rank(a) >= integer_rank(b) ? a : b;
  // Both floating. Two different 16-bit types meet in f32.
  if (is_16bit_floating(a) && is_16bit_floating(b)) return DType::F32;
  return floating_rank(a) >= floating_rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

}  // namespace hg
