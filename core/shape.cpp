// Shape printing, checked element counts, strides, dim normalisation and broadcasting.
#include "core/shape.h"

#include <algorithm>
#include <ostream>

#include "core/error.h"

namespace hg {

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

int64_t checked_numel(const Shape& shape, std::string_view op) {
  int64_t numel = 1;
  for (int64_t size : shape) HG_CHECK(size >= 0, op, ": negative dimension in shape ", shape);
  for (int64_t size : shape) {
    HG_CHECK(!__builtin_mul_overflow(numel, size, &numel), op, ": shape ", shape,
             " has more elements than fit in int64");
  }
  return numel;
}

int64_t checked_nbytes(int64_t numel, size_t element_size, std::string_view op) {
  int64_t nbytes = 0;
  HG_CHECK(!__builtin_mul_overflow(numel, int64_t(element_size), &nbytes), op, ": ", numel,
           " elements of ", element_size, " bytes overflow int64");
  return nbytes;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int normalize_dim(int64_t dim, int ndim, std::string_view op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // a 0-d tensor accepts 0 and -1
  HG_CHECK(dim >= lo && dim <= hi, op, ": dimension out of range (expected to be in range of [", lo, ", ",
           hi, "], but got ", dim, ")");
  return int(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    HG_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b,
             " cannot be broadcast together (dimension ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace hg
