// hg::Shape: the sizes of a tensor's dimensions (a vector of int64_t, printed as [2, 3]), plus the
// checked arithmetic every allocation goes through: a negative size or an element/byte count that
// overflows is an hg::Error before anything is allocated.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string_view>
#include <vector>

namespace hg {

struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}
  int ndim() const { return int(size()); }
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Product of the sizes; throws (naming `op`) on a negative size or int64 overflow.
int64_t checked_numel(const Shape& shape, std::string_view op);
// numel * element_size, throwing if it does not fit in int64.
int64_t checked_nbytes(int64_t numel, size_t element_size, std::string_view op);

// Row-major strides (in elements) for a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);

// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int normalize_dim(int64_t dim, int ndim, std::string_view op);

// NumPy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace hg
