// CPU GEMM on Eigen (see gemm.h). The only file that instantiates Eigen's matrix product, so its
// heavy templates compile once.
#include "ops/gemm.h"

#include "ops/gemm_packed.h"

#include <vector>

// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics when it inlines
// Eigen's packet math (a known false positive); it is silenced for this file only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>

namespace hg::detail {

namespace {

template <class S> using RowMajorMatrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S> using ColMajorMatrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class M> using StridedMap = Eigen::Map<const M, 0, Eigen::OuterStride<>>;

bool rows_contiguous(const MatrixView& m) { return (m.col_stride == 1 || m.cols == 1) && (m.rows == 1 || m.row_stride >= m.cols); }

// Calls f with `m` as an Eigen map: row-major if its rows are contiguous, column-major otherwise.
template <class S, class F>
void with_eigen(const MatrixView& m, F&& f) {
  const S* data = static_cast<const S*>(m.data);
  if (rows_contiguous(m)) {
    const int64_t outer = m.rows == 1 ? m.cols : m.row_stride;
    f(StridedMap<RowMajorMatrix<S>>(data, m.rows, m.cols, Eigen::OuterStride<>(std::max<int64_t>(outer, m.cols))));
  } else {
    const int64_t outer = m.cols == 1 ? m.rows : m.col_stride;
    f(StridedMap<ColMajorMatrix<S>>(data, m.rows, m.cols, Eigen::OuterStride<>(std::max<int64_t>(outer, m.rows))));
  }
}

template <class S>
void gemm_eigen(const MatrixView& a, const MatrixView& b, S* c, bool accumulate) {
  Eigen::Map<RowMajorMatrix<S>> C(c, a.rows, b.cols);
  if (a.cols == 0) {  // K = 0: the product is zero (and Eigen must not see empty operands)
    if (!accumulate) C.setZero();
    return;
  }
  with_eigen<S>(a, [&](const auto& A) {
    with_eigen<S>(b, [&](const auto& B) {
      if (accumulate) C.noalias() += A * B;
      else C.noalias() = A * B;
    });
  });
}

// Widens a 16-bit view into a dense f32 panel with the same orientation.
template <class T>
MatrixView widen(const MatrixView& m, std::vector<float>& panel) {
  panel.resize(size_t(m.rows * m.cols));
  const T* src = static_cast<const T*>(m.data);
  if (rows_contiguous(m)) {
    for (int64_t i = 0; i < m.rows; ++i) convert_to_float(src + i * m.row_stride, panel.data() + i * m.cols, size_t(m.cols));
    return {panel.data(), m.rows, m.cols, m.cols, 1};
  }
  for (int64_t j = 0; j < m.cols; ++j) convert_to_float(src + j * m.col_stride, panel.data() + j * m.rows, size_t(m.rows));
  return {panel.data(), m.rows, m.cols, 1, m.rows};
}

}  // namespace

// Rows contiguous (row-major with a row pitch of at least `cols`) or columns contiguous
// (column-major with a column pitch of at least `rows`). A stride-0 (broadcast) dimension of
// size > 1 is neither: those operands are copied first.
bool gemm_ready(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const bool row_major = (col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols);
  const bool col_major = (row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows);
  return row_major || col_major;
}

MatrixView matrix_view(const void* data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  HG_CHECK(gemm_ready(rows, cols, row_stride, col_stride), "gemm: operand with strides (", row_stride, ", ", col_stride,
           ") has neither contiguous rows nor contiguous columns");
  return {data, rows, cols, row_stride, col_stride};
}

MatrixView matrix_view(const Tensor& t) {
  HG_CHECK(t.dim() == 2, "gemm: expected a 2-D operand, got shape ", t.shape());
  return matrix_view(t.raw_data(), t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1]);
}

template <class S>
void gemm_dense(const MatrixView& a, const MatrixView& b, S* c, bool accumulate) {
  if (a.rows * b.cols == 0) return;
  if constexpr (std::is_same_v<S, float>) {
    if (packed_gemm_available() && a.cols > 0) return packed_gemm<float>(a, b, c, b.cols, accumulate);
  }
  gemm_eigen<S>(a, b, c, accumulate);
}
template void gemm_dense<float>(const MatrixView&, const MatrixView&, float*, bool);
template void gemm_dense<double>(const MatrixView&, const MatrixView&, double*, bool);

void gemm(DType dtype, const MatrixView& a, const MatrixView& b, void* c, bool accumulate) {
  HG_CHECK(a.cols == b.rows, "gemm: inner dimensions differ (", a.rows, "x", a.cols, " and ", b.rows, "x", b.cols, ")");
  const int64_t mn = a.rows * b.cols;
  if (mn == 0) return;
  visit_floating(dtype, "gemm", [&]<class T> {
    if constexpr (std::is_same_v<T, double>) {
      gemm_eigen<double>(a, b, static_cast<double*>(c), accumulate);
    } else if constexpr (std::is_same_v<T, float>) {
      gemm_dense<float>(a, b, static_cast<float*>(c), accumulate);
    } else {  // 16-bit: widened to f32 while packing (or as whole panels for Eigen), rounded once
      std::vector<float> c_panel(static_cast<size_t>(mn));
      T* out = static_cast<T*>(c);
      if (accumulate) convert_to_float(out, c_panel.data(), size_t(mn));
      if (packed_gemm_available() && a.cols > 0) {
        packed_gemm<T>(a, b, c_panel.data(), b.cols, accumulate);
      } else {
        std::vector<float> a_panel, b_panel;
        gemm_eigen<float>(widen<T>(a, a_panel), widen<T>(b, b_panel), c_panel.data(), accumulate);
      }
      convert_from_float(c_panel.data(), out, size_t(mn));
    }
  });
}

}  // namespace hg::detail
