// StridedWalk: the loop behind every elementwise kernel. It walks an n-d index space shared by N
// operands, each with its own strides (a broadcast operand has stride 0), and hands the kernel
// maximal 1-d runs:   run(ptrs, n, steps)   -- element j of operand k is at ptrs[k] + j*steps[k].
//
// Dimensions of size 1 are dropped and adjacent dimensions that are contiguous for every operand
// are merged first, so a contiguous tensor of any shape is a single run of numel elements.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace hg::detail {

// Elements per parallel task for cheap elementwise work (~tens of microseconds of work).
inline constexpr int64_t kElementwiseGrain = 32768;

template <size_t N>
class StridedWalk {
 public:
  // base: address of element 0 per operand; strides in elements; element_sizes in bytes.
  StridedWalk(const Shape& shape, std::array<char*, N> base, const std::array<Shape, N>& strides,
              std::array<int64_t, N> element_sizes)
      : base_(base) {
    numel_ = 1;
    for (int64_t s : shape) numel_ *= s;
    for (int d = 0; d < shape.ndim(); ++d) {
      if (shape[d] == 1) continue;
      const bool mergeable = !sizes_.empty() && [&] {
        for (size_t k = 0; k < N; ++k)
          if (strides_[k].back() != strides[k][d] * element_sizes[k] * shape[d]) return false;
        return true;
      }();
      if (mergeable) {
        sizes_.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) strides_[k].back() = strides[k][d] * element_sizes[k];
      } else {
        sizes_.push_back(shape[d]);
        for (size_t k = 0; k < N; ++k) strides_[k].push_back(strides[k][d] * element_sizes[k]);
      }
    }
    if (sizes_.empty()) {  // 0-d or all-ones: one element
      sizes_.push_back(1);
      for (size_t k = 0; k < N; ++k) strides_[k].push_back(0);
    }
  }

  int64_t numel() const { return numel_; }

  // Calls run(ptrs, n, steps) for the runs that cover linear indices [begin, end).
  template <class Run>
  void walk(int64_t begin, int64_t end, Run&& run) const {
    const int nd = int(sizes_.size());
    std::vector<int64_t> index(nd);
    int64_t rest = begin;
    for (int d = nd - 1; d >= 0; --d) {
      index[d] = rest % sizes_[d];
      rest /= sizes_[d];
    }
    std::array<int64_t, N> steps;
    for (size_t k = 0; k < N; ++k) steps[k] = strides_[k][nd - 1];
    for (int64_t pos = begin; pos < end;) {
      std::array<char*, N> ptrs = base_;
      for (size_t k = 0; k < N; ++k)
        for (int d = 0; d < nd; ++d) ptrs[k] += index[d] * strides_[k][d];
      const int64_t n = std::min(sizes_[nd - 1] - index[nd - 1], end - pos);
      run(ptrs, n, steps);
      pos += n;
      index[nd - 1] += n;
      for (int d = nd - 1; d > 0 && index[d] == sizes_[d]; --d) {
        index[d] = 0;
        ++index[d - 1];
      }
    }
  }

 private:
  std::array<char*, N> base_;
  std::vector<int64_t> sizes_;
  std::array<std::vector<int64_t>, N> strides_;  // in bytes
  int64_t numel_;
};

}  // namespace hg::detail
