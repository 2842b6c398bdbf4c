// Whether a strided (rows, cols) matrix can be handed to a GEMM as it is: the one rule the CPU
// GEMM (kernels/cpu/gemm.cpp) and cuBLASLt's (kernels/cuda/gemm.cpp) operands follow. Row-major:
// rows contiguous with a pitch of at least `cols`; column-major: columns contiguous with a pitch
// of at least `rows`. A stride along a size-1 dimension means nothing, so such a dimension never
// disqualifies a layout; a stride-0 (broadcast) dimension of size > 1 is neither (copy it first).
#pragma once
#include <cstdint>

namespace hg::kernels {

enum class GemmLayout { RowMajor, ColumnMajor, Neither };

inline GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols)) return GemmLayout::RowMajor;
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows)) return GemmLayout::ColumnMajor;
  return GemmLayout::Neither;
}

}  // namespace hg::kernels
