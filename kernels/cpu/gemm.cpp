// The CPU GEMM (see gemm.h): the packed-GEMM driver, which blocks the product for the caches
// and hands register tiles to the microkernel of the CPU level in use (gemm_microkernel.h),
// and Eigen for everything without a packed kernel. The only file that instantiates Eigen's
// matrix product, so its heavy templates compile once.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/parallel.h"
#include "core/visit.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/math/activation.h"
#include "core/simd_target.h"
#include "kernels/gemm_layout.h"

// NOTE: GCC 12 reports -Wmaybe-uninitialized inside its own SIMD intrinsics when it inlines
// Eigen's packet math (a known false positive); it is silenced for this file only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

namespace hg::kernels::cpu {

namespace {

// Products smaller than this (about 20 microseconds) run on the calling thread.
constexpr int64_t kMinParallelFlops = int64_t(1) << 21;
// Native bf16 products (AMX above all) run the same flops several times sooner, so a second
// thread pays for its start only on larger products: the char-LSTM's recurrent bf16 products
// (32 x 256 x 1024, 2^24 flops, ~30 us on AMX) split over 2 threads made its step slower than
// at 1 thread (32.9 against 32.1 ms); kept on one, 2 threads take 26.5-28.0 ms.
constexpr int64_t kNativeBf16Speedup = 16;

// ---- which kernel -------------------------------------------------------------------------------

const PackedGemmKernel* packed_kernel() {
#if HG_X86
  switch (hg::cpu::isa()) {
    case hg::cpu::Isa::Amx: return &packed_gemm_amx();
    case hg::cpu::Isa::Avx512Bf16: return &packed_gemm_avx512bf16();
    case hg::cpu::Isa::Avx512: return &packed_gemm_avx512();
    case hg::cpu::Isa::Avx2: return &packed_gemm_avx2();
    default: return nullptr;
  }
#else
  return nullptr;  // aarch64: Eigen's NEON GEMM
#endif
}

// ---- Eigen ----------------------------------------------------------------------------------------

template <class S> using RowMajorMatrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S> using ColMajorMatrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class M> using StridedMap = Eigen::Map<const M, 0, Eigen::OuterStride<>>;

bool rows_contiguous(const MatrixView& m) {
  return gemm_layout(m.rows, m.cols, m.row_stride, m.col_stride) == GemmLayout::RowMajor;
}

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
void gemm_eigen_rows(const MatrixView& a, const MatrixView& b, S* c, bool accumulate) {
  Eigen::Map<RowMajorMatrix<S>> C(c, a.rows, b.cols);
  with_eigen<S>(a, [&](const auto& A) {
    with_eigen<S>(b, [&](const auto& B) {
      if (accumulate) C.noalias() += A * B;
      else C.noalias() = A * B;
    });
  });
}

// Eigen's product, one block of rows of C per task (Eigen itself runs single-threaded here).
template <class S>
void gemm_eigen(const MatrixView& a, const MatrixView& b, S* c, bool accumulate) {
  if (a.cols == 0) {  // K = 0: the product is zero (and Eigen must not see empty operands)
    if (!accumulate) std::fill(c, c + a.rows * b.cols, S(0));
    return;
  }
  const int64_t flops_per_row = 2 * b.cols * a.cols;
  parallel_for(0, a.rows, std::max<int64_t>(8, kMinParallelFlops / std::max<int64_t>(flops_per_row, 1)),
               [&](int64_t lo, int64_t hi) {
                 const MatrixView rows{static_cast<const S*>(a.data) + lo * a.row_stride, hi - lo, a.cols, a.row_stride,
                                       a.col_stride};
                 gemm_eigen_rows<S>(rows, b, c + lo * b.cols, accumulate);
               });
}

// ---- 16-bit operands --------------------------------------------------------------------------

// Widens a 16-bit block [r0, r0+rows) x [c0, c0+cols) of `m` into a dense f32 copy with the same
// orientation, with the bulk SIMD converters: converting while packing would take one scalar
// conversion per value. The packed driver widens block by block just before packing; Eigen
// (cols = m.cols, rows = m.rows) gets the whole operand.
template <class T>
MatrixView widen_block(const MatrixView& m, int64_t r0, int64_t rows, int64_t c0, int64_t cols, std::vector<float>& buffer) {
  buffer.resize(static_cast<size_t>(rows * cols));
  const T* origin = static_cast<const T*>(m.data) + r0 * m.row_stride + c0 * m.col_stride;
  if (m.col_stride == 1 || cols == 1) {  // rows along memory
    for (int64_t r = 0; r < rows; ++r) convert_to_float(origin + r * m.row_stride, buffer.data() + r * cols, size_t(cols));
    return {buffer.data(), rows, cols, cols, 1};
  }
  if (m.row_stride == 1 || rows == 1) {  // columns along memory
    for (int64_t c = 0; c < cols; ++c) convert_to_float(origin + c * m.col_stride, buffer.data() + c * rows, size_t(rows));
    return {buffer.data(), rows, cols, 1, rows};
  }
  for (int64_t r = 0; r < rows; ++r)  // (gemm_ready rules this out; kept total)
    for (int64_t c = 0; c < cols; ++c) buffer[size_t(r * cols + c)] = float(Acc<T>(origin[r * m.row_stride + c * m.col_stride]));
  return {buffer.data(), rows, cols, cols, 1};
}

// ---- the packed driver --------------------------------------------------------------------------

// A 64-byte aligned scratch buffer (aligned panel loads), reused by each thread.
struct Scratch {
  std::vector<float> data;
  float* get(size_t n) {
    if (data.size() < n + 16) data.resize(n + 16);
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(data.data()) + 63) & ~uintptr_t(63));
  }
};

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// K in equal slices of at most kernel.kc (784 = 4 x 196, not 3 x 256 + 16): a thin last slice
// would pay a whole pass of C loads and stores for a few multiply-adds. Slices are a multiple of
// the k granule, so that only the last one is padded (AMX: 784 = 3 x 224 + 112).
int64_t slice_depth_for(const PackedGemmKernel& kernel, int64_t K, int64_t granule) {
  const int64_t slices = std::max<int64_t>(1, (K + kernel.kc - 1) / kernel.kc);
  return round_up((K + slices - 1) / slices, std::max<int64_t>(8, granule));
}

// With native bf16 products (AVX512-BF16, AMX) bf16 panels stay bf16: half the bytes.
template <class T>
bool native_bf16_for(const PackedGemmKernel& kernel) {
  return std::is_same_v<T, bfloat16> && kernel.bf16 != nullptr;
}

// What a slice of depth kc occupies per panel lane, in 4-byte units: kc f32 values, or the bf16
// microkernel's padded k-pairs.
int64_t lane_depth(const PackedGemmKernel& kernel, bool native_bf16, int64_t kc) {
  return native_bf16 ? round_up(kc, kernel.bf16->k_granule) / 2 : kc;
}

// The k granule of the slices: one f32 value, or the bf16 microkernel's.
int64_t k_granule(const PackedGemmKernel& kernel, bool native_bf16) {
  return native_bf16 ? kernel.bf16->k_granule : 1;
}

// Whether the tiles read A where it is (PackedGemmKernel::tile_direct) instead of a packed copy: an
// f32 A with contiguous rows. Not when the rows are a multiple of 2 KB apart: then a tile's 12 rows
// fall on a few of L1's 64 sets (all of them on one set group at 4 KB), more lines than the sets
// have ways beside the B panel's.
template <class T>
bool reads_a_in_place(const PackedGemmKernel& kernel, const MatrixView& a) {
  constexpr int64_t kAliasingFloats = 512;  // 2 KB
  return std::is_same_v<T, float> && kernel.tile_direct != nullptr && a.col_stride == 1 && a.row_offsets == nullptr &&
         a.row_stride % kAliasingFloats != 0;
}

// Packs B's rows [k0, k0 + kc) x columns [j0, j0 + nc) into nr-wide panels at `out` (panel j at
// out + j * depth).
template <class T>
void pack_b_block(const PackedGemmKernel& kernel, const MatrixView& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                  float* out) {
  thread_local std::vector<float> wide;  // a 16-bit block widened to f32 before packing
  if (native_bf16_for<T>(kernel)) kernel.bf16->pack_b(b, k0, kc, j0, nc, reinterpret_cast<uint16_t*>(out));
  else if constexpr (std::is_same_v<T, float>) kernel.pack_b(b, k0, kc, j0, nc, out);
  else kernel.pack_b(widen_block<T>(b, k0, kc, j0, nc, wide), 0, kc, 0, nc, out);
}

// The rows [i_begin, i_end) x columns [j_begin, j_end) of C, for every k: one task's share. B's
// panels come from `prepacked` when given (pack_rhs), else are packed here.
//
// Loop order (BLIS's): for each column block, each K slice of B packed once, then every row block
// of A against it. c == nullptr (a 16-bit result, with a finish_block, no accumulation): there is
// no f32 C in memory, so a row block must be finished before the next one starts -- all of the
// column block's K slices are packed first, and each row block runs through them into a
// per-thread scratch block that finish_block rounds into the result while it is in cache.
template <class T>
void packed_block(const PackedGemmKernel& kernel, const MatrixView& a, const MatrixView& b, const PackedRhs* prepacked,
                  float* c, int64_t ldc, bool accumulate, const GemmEpilogue& epilogue, int64_t i_begin, int64_t i_end,
                  int64_t j_begin, int64_t j_end) {
  thread_local Scratch a_scratch, b_scratch, c_scratch;
  thread_local std::vector<float> wide;  // a 16-bit block widened to f32 before packing
  const bool native_bf16 = native_bf16_for<T>(kernel);
  const int64_t K = a.cols, mr = native_bf16 ? kernel.bf16->mr : kernel.mr, nr = kernel.nr;
  const int64_t slice_depth = slice_depth_for(kernel, K, k_granule(kernel, native_bf16));
  const int64_t span = c != nullptr ? slice_depth : K;  // the K slices whose B panels are held at once
  const bool direct_a = reads_a_in_place<T>(kernel, a);
  if (native_bf16 && kernel.bf16->begin) kernel.bf16->begin();
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kernel.nc) {
    const int64_t nc = std::min(kernel.nc, j_end - j0), nc_padded = round_up(nc, nr);
    // 4-byte units between two held slices' panels (64-byte aligned)
    const int64_t slice_floats = round_up(lane_depth(kernel, native_bf16, slice_depth) * nc_padded + kernel.slack, 16);
    for (int64_t span0 = 0; span0 < K; span0 += span) {
      const int64_t span_end = std::min(K, span0 + span);
      float* panels = prepacked != nullptr ? nullptr
                                           : b_scratch.get(size_t((span_end - span0 + slice_depth - 1) / slice_depth * slice_floats));
      const auto packed_b_of = [&](int64_t k0) -> const float* {
        const int64_t depth = lane_depth(kernel, native_bf16, std::min(slice_depth, K - k0));
        if (prepacked != nullptr) return prepacked->slice(k0) + j0 * depth;  // (j0 / nr is the panel)
        return panels + (k0 - span0) / slice_depth * slice_floats;
      };
      if (prepacked == nullptr)
        for (int64_t k0 = span0; k0 < span_end; k0 += slice_depth)
          pack_b_block<T>(kernel, b, k0, std::min(slice_depth, K - k0), j0, nc, const_cast<float*>(packed_b_of(k0)));
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kernel.mc) {
        const int64_t mc = std::min(kernel.mc, i_end - i0);
        // Where this block's tiles go: C itself, or the scratch block (leading dimension nc_padded).
        const int64_t block_ld = c != nullptr ? ldc : nc_padded;
        float* c_block = c != nullptr ? c + i0 * ldc + j0 : c_scratch.get(size_t(mc * nc_padded));
        const bool started = c == nullptr && epilogue.start_block;
        if (started) epilogue.start_block(c_block, block_ld, i0, mc, j0, nc);
        for (int64_t k0 = span0; k0 < span_end; k0 += slice_depth) {
          const int64_t kc = std::min(slice_depth, K - k0), depth = lane_depth(kernel, native_bf16, kc);
          const float* packed_b = packed_b_of(k0);
          // (no packed A with direct_a: the tiles read A's rows where they are)
          float* packed_a = direct_a ? nullptr : a_scratch.get(size_t(round_up(mc, mr) * depth + kernel.slack));
          if (!direct_a) {
            if (native_bf16) kernel.bf16->pack_a(a, i0, mc, k0, kc, reinterpret_cast<uint16_t*>(packed_a));
            else if constexpr (std::is_same_v<T, float>) kernel.pack_a(a, i0, mc, k0, kc, packed_a);
            else kernel.pack_a(widen_block<T>(a, i0, mc, k0, kc, wide), 0, mc, 0, kc, packed_a);
          }
          // The bias goes in with the first slice, relu on the last: each tile adds its columns' bias.
          const auto* bias = k0 == 0 ? static_cast<const float*>(epilogue.column_bias) : nullptr;
          for (int64_t j = 0; j < nc; j += nr) {
            const TileStore store{.add_to_c = k0 > 0 || accumulate || started, .bias = bias ? bias + j0 + j : nullptr,
                                  .relu = epilogue.relu && k0 + kc == K};
            const int64_t cols = std::min(nr, nc - j);
            // A short last A panel takes the full B panels in pairs (the even one runs both).
            const bool even_panel = (j / nr) % 2 == 0;
            const bool in_short_pair = !native_bf16 && !direct_a && kernel.tile_short != nullptr &&
                                       (even_panel ? j + 2 * nr <= nc : j + nr <= nc);
            for (int64_t p = 0; p < mc; p += mr) {
              float* c_tile = c_block + p * block_ld + j;
              const int64_t rows = std::min(mr, mc - p);
              if (in_short_pair && rows <= kernel.short_rows) {
                if (even_panel)
                  kernel.tile_short(kc, packed_a + p * depth, packed_b + j * depth, packed_b + (j + nr) * depth,
                                    c_tile, block_ld, rows, store);
                continue;
              }
              if (direct_a)
                kernel.tile_direct(kc, static_cast<const float*>(a.data) + (i0 + p) * a.row_stride + k0, a.row_stride,
                                   packed_b + j * depth, c_tile, block_ld, rows, cols, store);
              else if (native_bf16)
                kernel.bf16->tile(depth, reinterpret_cast<const uint16_t*>(packed_a + p * depth),
                                 reinterpret_cast<const uint16_t*>(packed_b + j * depth), c_tile, block_ld, rows, cols,
                                 store);
              else
                kernel.tile(kc, packed_a + p * depth, packed_b + j * depth, c_tile, block_ld, rows, cols, store);
            }
          }
          if (epilogue.finish_block && k0 + kc == K) epilogue.finish_block(c_block, block_ld, i0, mc, j0, nc);
        }
      }
    }
  }
  if (native_bf16 && kernel.bf16->end) kernel.bf16->end();
}

// True when packed_gemm<T> multiplies K in one slice.
template <class T>
bool one_slice(const PackedGemmKernel& kernel, int64_t K) {
  const bool native_bf16 = native_bf16_for<T>(kernel);
  return slice_depth_for(kernel, K, k_granule(kernel, native_bf16)) >= K;
}

// The multiply-adds a kernel runs per k for an M x N product, padding lanes included.
int64_t padded_tile_work(const PackedGemmKernel& kernel, int64_t M, int64_t N) {
  return round_up(M, kernel.mr) * round_up(N, kernel.nr);
}

}  // namespace

bool has_packed_gemm() { return packed_kernel() != nullptr; }

bool has_native_bf16_gemm() {
  const PackedGemmKernel* kernel = packed_kernel();
  return kernel != nullptr && kernel->bf16 != nullptr;
}

bool prefer_transposed_product(int64_t M, int64_t N) {
  const PackedGemmKernel* kernel = packed_kernel();
  return kernel != nullptr && padded_tile_work(*kernel, N, M) < padded_tile_work(*kernel, M, N);
}

namespace {

template <class T>
void packed_gemm_driver(const MatrixView& a, const MatrixView& b, const PackedRhs* prepacked, float* c, int64_t ldc,
                        bool accumulate, const GemmEpilogue& epilogue) {
  const PackedGemmKernel& kernel = *packed_kernel();
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  // NOTE: one parallel region per GEMM, with independent tasks: each task owns a range of rows or
  // of columns and packs what it reads itself. A region per K-slice (BLIS's shared B panel)
  // costs a fork/join each, which dominated MLP-sized products at 2 threads.
  const int64_t panels = (N + kernel.nr - 1) / kernel.nr, row_blocks = (M + kernel.mc - 1) / kernel.mc;
  const int64_t min_flops = native_bf16_for<T>(kernel) ? kMinParallelFlops * kNativeBf16Speedup : kMinParallelFlops;
  const int64_t threads = 2 * M * N * K >= min_flops ? get_num_threads() : 1;
  const bool split_columns = panels >= 2 * threads || panels >= row_blocks;
  const int64_t tasks = std::max<int64_t>(1, std::min(threads, split_columns ? panels : row_blocks));
  parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      if (split_columns)
        packed_block<T>(kernel, a, b, prepacked, c, ldc, accumulate, epilogue, 0, M,
                        std::min(N, panels * task / tasks * kernel.nr), std::min(N, panels * (task + 1) / tasks * kernel.nr));
      else
        packed_block<T>(kernel, a, b, prepacked, c, ldc, accumulate, epilogue,
                        std::min(M, row_blocks * task / tasks * kernel.mc),
                        std::min(M, row_blocks * (task + 1) / tasks * kernel.mc), 0, N);
    }
  });
}

}  // namespace

template <class T>
void packed_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, bool accumulate,
                 const GemmEpilogue& epilogue) {
  const auto offsets_readable = [](const MatrixView& m) {
    return m.row_offsets == nullptr || (std::is_same_v<T, bfloat16> && has_native_bf16_gemm() && m.col_stride == 1);
  };
  HG_CHECK(offsets_readable(a) && offsets_readable(b),
           "internal error: packed_gemm reads row offsets only in bf16 operands with contiguous rows, on a CPU with "
           "native bf16 products");
  HG_CHECK(c != nullptr || (!accumulate && epilogue.finish_block),
           "internal error: packed_gemm without C needs a finish_block and no accumulation");
  HG_CHECK(c == nullptr || !epilogue.start_block, "internal error: packed_gemm's start_block is for products without C");
  packed_gemm_driver<T>(a, b, nullptr, c, ldc, accumulate, epilogue);
}

template <class T>
PackedRhs pack_rhs(const MatrixView& b) {
  HG_CHECK(b.row_offsets == nullptr, "internal error: pack_rhs of a view with row offsets");
  const PackedGemmKernel& kernel = *packed_kernel();
  PackedRhs packed;
  packed.dtype = dtype_of<T>();
  packed.K = b.rows, packed.N = b.cols;
  const bool native_bf16 = native_bf16_for<T>(kernel);
  packed.slice_depth = slice_depth_for(kernel, std::max<int64_t>(b.rows, 1), k_granule(kernel, native_bf16));
  const int64_t depth = lane_depth(kernel, native_bf16, packed.slice_depth);
  packed.slice_floats = size_t(round_up(depth * round_up(b.cols, kernel.nr) + kernel.slack, 16));
  const int64_t slices = (b.rows + packed.slice_depth - 1) / packed.slice_depth;
  packed.storage.resize(size_t(slices) * packed.slice_floats + 16);
  packed.offset = size_t((64 - reinterpret_cast<uintptr_t>(packed.storage.data()) % 64) % 64 / sizeof(float));
  for (int64_t k0 = 0; k0 < b.rows; k0 += packed.slice_depth)
    pack_b_block<T>(kernel, b, k0, std::min(packed.slice_depth, b.rows - k0), 0, b.cols,
                    packed.storage.data() + packed.offset + size_t(k0 / packed.slice_depth) * packed.slice_floats);
  return packed;
}

template <class T>
void packed_gemm(const MatrixView& a, const PackedRhs& b, float* c, int64_t ldc, bool accumulate,
                 const GemmEpilogue& epilogue) {
  HG_CHECK(b.dtype == dtype_of<T>() && a.cols == b.K, "internal error: packed_gemm of a ", a.rows, "x", a.cols, " ",
           dtype_of<T>(), " operand with a packed ", b.K, "x", b.N, " ", b.dtype, " one");
  if (a.rows * b.N == 0 || b.K == 0) return;
  // (B's view carries only its shape here: every panel comes from b)
  packed_gemm_driver<T>(a, MatrixView{nullptr, b.K, b.N, b.N, 1}, &b, c, ldc, accumulate, epilogue);
}

template PackedRhs pack_rhs<float>(const MatrixView&);
template PackedRhs pack_rhs<half>(const MatrixView&);
template PackedRhs pack_rhs<bfloat16>(const MatrixView&);
template void packed_gemm<float>(const MatrixView&, const PackedRhs&, float*, int64_t, bool, const GemmEpilogue&);
template void packed_gemm<half>(const MatrixView&, const PackedRhs&, float*, int64_t, bool, const GemmEpilogue&);
template void packed_gemm<bfloat16>(const MatrixView&, const PackedRhs&, float*, int64_t, bool, const GemmEpilogue&);

template void packed_gemm<float>(const MatrixView&, const MatrixView&, float*, int64_t, bool, const GemmEpilogue&);
template void packed_gemm<half>(const MatrixView&, const MatrixView&, float*, int64_t, bool, const GemmEpilogue&);
template void packed_gemm<bfloat16>(const MatrixView&, const MatrixView&, float*, int64_t, bool, const GemmEpilogue&);

// ---- entry points -------------------------------------------------------------------------------

// Row- or column-major (kernels/gemm_layout.h); other operands are copied first.
bool gemm_ready(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return gemm_layout(rows, cols, row_stride, col_stride) != GemmLayout::Neither;
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

namespace {

// Eigen's product with the epilogue as passes over C: the bias first (the product then
// accumulates onto it), relu after.
template <class S>
void gemm_eigen_with_epilogue(const MatrixView& a, const MatrixView& b, S* c, bool accumulate, const S* bias,
                              bool relu) {
  const int64_t M = a.rows, N = b.cols;
  if (bias != nullptr) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] = accumulate ? c[i * N + j] + bias[j] : bias[j];
    accumulate = true;
  }
  gemm_eigen<S>(a, b, c, accumulate);
  if (relu) std::transform(c, c + M * N, c, [](S x) { return math::Relu::fwd(x); });
}

}  // namespace

template <class S>
void gemm_dense(const MatrixView& a, const MatrixView& b, S* c, bool accumulate, const S* bias, bool relu) {
  HG_CHECK(a.row_offsets == nullptr && b.row_offsets == nullptr, "internal error: gemm_dense of a view with row offsets");
  if (a.rows * b.cols == 0) return;
  if constexpr (std::is_same_v<S, float>)
    if (has_packed_gemm() && a.cols > 0) return packed_gemm<float>(a, b, c, b.cols, accumulate, {.column_bias = bias, .relu = relu});
  gemm_eigen_with_epilogue<S>(a, b, c, accumulate, bias, relu);
}
template void gemm_dense<float>(const MatrixView&, const MatrixView&, float*, bool, const float*, bool);
template void gemm_dense<double>(const MatrixView&, const MatrixView&, double*, bool, const double*, bool);

namespace {

// What gemm() does to each finished f32 block of C (rows of `cols` values, ldc apart) before the
// T result `out` (M, N) holds it: with gelu, bias + a @ b goes to `pre` (if asked) rounded to T,
// and GELU is taken of that rounded value -- what linear's T output followed by gelu() computes,
// so the fused pair equals the unfused one bit for bit; a 16-bit result is then rounded once.
// For f32, `out` is C itself.
template <class T>
void finish_rows(float* block, int64_t ldc, int64_t row, int64_t rows, int64_t col, int64_t cols, bool gelu, T* pre,
                 T* out, int64_t N) {
  thread_local std::vector<T> rounded_row;  // 16-bit GELU without a pre_gelu output
  for (int64_t r = 0; r < rows; ++r) {
    float* values = block + r * ldc;
    const int64_t at = (row + r) * N + col;
    if (gelu) {
      if constexpr (std::is_same_v<T, float>) {
        if (pre != nullptr) std::copy_n(values, cols, pre + at);
      } else {
        if (pre == nullptr && rounded_row.size() < size_t(cols)) rounded_row.resize(size_t(cols));
        T* rounded = pre != nullptr ? pre + at : rounded_row.data();
        convert_from_float(values, rounded, size_t(cols));
        convert_to_float(rounded, values, size_t(cols));
      }
      gelu_f32(values, values, cols);
    }
    if constexpr (!std::is_same_v<T, float>) convert_from_float(values, out + at, size_t(cols));
  }
}

// f64's GELU epilogue (no packed kernel, no f32 lanes): a pass over C with Gelu's own formula.
void gelu_f64(double* c, int64_t n, double* pre) {
  if (pre != nullptr) std::copy_n(c, n, pre);
  std::transform(c, c + n, c, [](double x) { return math::Gelu::fwd(x); });
}

// gemm() for f32 and 16-bit: the product in f32 (C itself for f32; a panel for 16-bit, rounded
// into c block by block as the packed kernel finishes it), then finish_rows.
template <class T>
void gemm_f32_or_16bit(const MatrixView& a, const MatrixView& b, T* out, bool accumulate, const T* bias, bool relu,
                       bool gelu, T* pre) {
  const int64_t M = a.rows, N = b.cols, mn = M * N;
  float* c_f32 = nullptr;
  std::unique_ptr<float[]> c_panel;  // (uninitialised: every value is written before it is read)
  // A 16-bit product that overwrites needs no f32 C at all: each block of it can be rounded into
  // `out` from a scratch that stays in cache (packed_block). Measured on AMX: an f32 C beyond the
  // L2 (2048 x 64 x 1024: 8 MiB) written and read back cost a trip to memory, 1.26-1.59 ms against
  // 0.63 without (2048 x 1024 x 256: 1.37-1.47 against 1.06-1.12); a C that stays in cache
  // (1024 x 2048 x 256, a weight gradient: 1 MiB) is 5-10% faster than holding every K slice of
  // B at once, as that path must. With one K slice both orders are the same.
  constexpr int64_t kCachedC = int64_t(1) << 18;  // values: 1 MiB of f32
  const bool without_c = !std::is_same_v<T, float> && !accumulate && has_packed_gemm() && a.cols > 0 &&
                         (mn > kCachedC || one_slice<T>(*packed_kernel(), a.cols));
  std::vector<float> bias_f32;
  const float* bias_or_null = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    c_f32 = out;
    bias_or_null = bias;
  } else {
    if (!without_c) c_panel.reset(new float[size_t(mn)]);
    c_f32 = c_panel.get();
    if (accumulate) convert_to_float(out, c_f32, size_t(mn));
    if (bias != nullptr) {
      bias_f32.resize(size_t(N));
      convert_to_float(bias, bias_f32.data(), bias_f32.size());
      bias_or_null = bias_f32.data();
    }
  }
  const bool needs_finish = gelu || !std::is_same_v<T, float>;
  const BlockFinisher finish = [&](float* block, int64_t ldc, int64_t row, int64_t rows, int64_t col, int64_t cols) {
    finish_rows<T>(block, ldc, row, rows, col, cols, gelu, pre, out, N);
  };
  if (has_packed_gemm() && a.cols > 0) {
    packed_gemm<T>(a, b, c_f32, N, accumulate,
                   {.column_bias = bias_or_null, .relu = relu, .finish_block = needs_finish ? finish : nullptr});
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    gemm_dense<float>(a, b, c_f32, accumulate, bias_or_null, relu);
  } else {
    std::vector<float> a_panel, b_panel;
    gemm_dense<float>(widen_block<T>(a, 0, M, 0, a.cols, a_panel), widen_block<T>(b, 0, b.rows, 0, N, b_panel), c_f32,
                      accumulate, bias_or_null, relu);
  }
  if (needs_finish) finish(c_f32, N, 0, M, 0, N);  // (Eigen: the whole of C as one block)
}

}  // namespace

void gemm(DType dtype, const MatrixView& a, const MatrixView& b, void* c, bool accumulate,
          const GemmEpilogue& epilogue) {
  HG_CHECK(a.cols == b.rows, "gemm: inner dimensions differ (", a.rows, "x", a.cols, " and ", b.rows, "x", b.cols, ")");
  HG_CHECK(!(epilogue.relu && epilogue.gelu), "internal error: gemm asked for both relu and gelu");
  HG_CHECK(a.row_offsets == nullptr && b.row_offsets == nullptr, "internal error: gemm of a view with row offsets");
  const int64_t mn = a.rows * b.cols;
  if (mn == 0) return;
  visit_floating(dtype, "gemm", [&]<class T> {
    const T* bias = static_cast<const T*>(epilogue.column_bias);
    T* const pre = static_cast<T*>(epilogue.pre_gelu);
    if constexpr (std::is_same_v<T, double>) {
      gemm_dense<T>(a, b, static_cast<T*>(c), accumulate, bias, epilogue.relu);
      if (epilogue.gelu) gelu_f64(static_cast<T*>(c), mn, pre);
    } else {
      gemm_f32_or_16bit<T>(a, b, static_cast<T*>(c), accumulate, bias, epilogue.relu, epilogue.gelu, pre);
    }
  });
}

}  // namespace hg::kernels::cpu
