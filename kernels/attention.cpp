// Fused attention on the CPU (kernels/attention.h): per (batch, block of query rows), an online
// softmax over blocks of keys. Names follow the FlashAttention-2 paper: S = Q K^T * scale + mask
// (a block of scores), P = exp(S - m) (its probabilities), m and l the running row maximum and
// sum, lse = m + log l.
//
// Two types: S, the compute type of the scores, statistics and sums (f32, f64 for f64), and G,
// the GEMMs' operand type. For bf16 / f16 inputs G is the input's type, as in FlashAttention-2
// and PyTorch's CPU flash kernel: Q, K, V and dO are multiplied as they are, P and dS are rounded
// to G before their products, and every product accumulates in f32. Widening the 16-bit inputs
// to f32 instead made bf16 attention slower than f32 (T = 1024: 26.3 ms against 25.6); with G
// bf16 the products run on the CPU's native bf16 pairs (AVX512-BF16, AMX) where it has them.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/half.h"
#include "core/parallel.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/math/dropout.h"

namespace hg::kernels {

namespace {

// Query and key rows per block, square: a block of scores stays in L2 with its Q, K and V rows,
// and each GEMM is large enough to pay for its packing. f32: 96, a multiple of the f32 kernel's
// 12-row tiles -- 64 left 8 of the last tile's 12 rows idle in every product whose rows are a
// block's (forward + backward, T = 1024, D = 64, 4 heads, 1 thread: 26.3 -> 23.9 ms). 16-bit:
// 128, a multiple of the bf16 kernels' 16-row tiles (14.8 -> 12.6 ms). Larger blocks lost at
// T = 256, where causality leaves half of each diagonal block idle. f64 (gradcheck's reference,
// on Eigen) keeps 64.
// NOTE: with 96-row f64 blocks, a 4-row last block (T = 100) came out a bit different from run to
// run on a loaded machine with 2 threads (Eigen's product; not understood). 64 never did.
template <class G>
constexpr int64_t kBlock = std::is_same_v<G, double> ? 64 : std::is_same_v<G, float> ? 96 : 128;

// Where each batch entry's [rows, cols] matrix of `t` ([..., rows, cols]) starts: the batch dims
// may be several (a [B, H, T, D] view of a [B, T, H * D] projection) or broadcast (stride 0).
std::vector<int64_t> batch_offsets(const Tensor& t, int64_t batch) {
  const int n = t.dim();
  std::vector<int64_t> offsets(size_t(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rest = b, offset = 0;
    for (int d = n - 3; d >= 0; --d) {
      offset += rest % t.shape()[d] * t.strides()[d];
      rest /= t.shape()[d];
    }
    offsets[size_t(b)] = offset;
  }
  return offsets;
}

// One batch entry's rows: row i starts at data + i * stride, its values one apart.
template <class S>
struct Rows {
  const S* data;
  int64_t stride;
  const S* row(int64_t i) const { return data + i * stride; }
};

// An operand [batch, rows, cols] of the compute type S, read in place through its strides (the
// heads of nn::MultiheadAttention are [B, H, T, D] views of [B, T, H * D]). A copy only where one
// is needed: 16-bit values are widened, and a last dim with stride != 1 (or rows that overlap)
// is gathered. The arithmetic is the same either way; only the addressing differs.
template <class S>
struct Operand {
  Tensor held;  // the tensor read: the input itself or its compute-type copy
  std::vector<int64_t> offsets;
  int64_t row_stride;
  Rows<S> operator[](int64_t b) const { return {held.data_ptr<S>() + offsets[size_t(b)], row_stride}; }
};

template <class S>
Operand<S> operand(const Tensor& t, int64_t batch, int64_t rows, int64_t cols) {
  const int n = t.dim();
  const bool in_place = t.dtype() == dtype_of<S>() && (cols <= 1 || t.strides()[n - 1] == 1) &&
                        (rows <= 1 || t.strides()[n - 2] >= cols);
  const Tensor held = in_place                     ? t
                      : t.dtype() == dtype_of<S>() ? detail::dense_copy(t)
                                                   : detail::copy_with_options(t, {.dtype = dtype_of<S>()});
  // One row: its stride never steps, so it gets the dense one (the GEMM views then see the
  // layout a contiguous operand gives).
  const int64_t row_stride = rows <= 1 ? cols : held.strides()[n - 2];
  return {held, batch_offsets(held, batch), row_stride};
}

// C (S, dense, leading dimension N) [+]= A @ B with A and B of the operand type G. For G == S the
// compute type's GEMM; for 16-bit G the packed GEMM's f32 accumulation, or -- on a CPU level
// without it (generic, aarch64) -- the operands widened to f32 first: the same products.
template <class S, class G>
void block_gemm(const cpu::MatrixView& a, const cpu::MatrixView& b, S* c, bool accumulate) {
  if constexpr (std::is_same_v<S, G>) {
    cpu::gemm_dense<S>(a, b, c, accumulate);
  } else if (cpu::has_packed_gemm()) {
    cpu::packed_gemm<G>(a, b, c, b.cols, accumulate);
  } else {
    thread_local std::vector<float> wide_a, wide_b;
    const auto widened = [](const cpu::MatrixView& m, std::vector<float>& out) {
      out.resize(size_t(m.rows * m.cols));
      const G* data = static_cast<const G*>(m.data);
      for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t col = 0; col < m.cols; ++col)
          out[size_t(r * m.cols + col)] = float(data[r * m.row_stride + col * m.col_stride]);
      return cpu::matrix_view(out.data(), m.rows, m.cols, m.cols, 1);
    };
    cpu::gemm_dense<float>(widened(a, wide_a), widened(b, wide_b), c, accumulate);
  }
}

// A right operand that several products share (a key block's K^T against every query block),
// packed once where the CPU's packed GEMM multiplies G (the same bits as packing it per product:
// cpu::pack_rhs), else the view itself. Packing per product was a sixth of f32 attention's time
// (T = 256, 4 heads, 1 thread: transposes and packs 15% of perf's samples).
template <class G>
struct SharedRhs {
  cpu::MatrixView view;
  std::optional<cpu::PackedRhs> packed;
};
template <class G>
SharedRhs<G> shared_rhs(const cpu::MatrixView& view) {
  SharedRhs<G> rhs{view, std::nullopt};
  if constexpr (!std::is_same_v<G, double>)
    if (cpu::has_packed_gemm() && view.rows > 0 && view.cols > 0) rhs.packed = cpu::pack_rhs<G>(view);
  return rhs;
}
template <class S, class G>
void block_gemm(const cpu::MatrixView& a, const SharedRhs<G>& b, S* c, bool accumulate) {
  if constexpr (!std::is_same_v<G, double>)
    if (b.packed) return cpu::packed_gemm<G>(a, *b.packed, c, b.view.cols, accumulate);
  block_gemm<S, G>(a, b.view, c, accumulate);
}

// Each key block's K_j^T (E x cols) or V_j (cols x Ev) etc. as a shared right operand: view(j0,
// cols) gives block j's view.
template <class G, class View>
std::vector<SharedRhs<G>> key_blocks(const AttentionGeometry& g, const View& view) {
  std::vector<SharedRhs<G>> blocks;
  for (int64_t j0 = 0; j0 < g.S; j0 += kBlock<G>) blocks.push_back(shared_rhs<G>(view(j0, std::min(kBlock<G>, g.S - j0))));
  return blocks;
}

// A block's values of the compute type S as GEMM operands of type G: rounded for 16-bit G (into
// `buffer`), the values themselves for G == S.
template <class S, class G>
const G* as_operand(const S* values, int64_t n, std::vector<G>& buffer) {
  if constexpr (std::is_same_v<S, G>) {
    return values;
  } else {
    buffer.resize(size_t(n));
    convert_from_float(values, buffer.data(), size_t(n));
    return buffer.data();
  }
}

// A block of S values (P, dS) that becomes a GEMM's operand of type G. For 16-bit G its rows are
// rounded one by one as each is finished, while it is still in L1 (rounding the whole block after
// its rows came back from L2 was 9% of bf16 attention's time) -- unless the block changes after its
// rows are done (dropout's factors), when the whole block is rounded at the end. For G == S the
// values themselves are the operand.
template <class S, class G>
class RoundedOperand {
 public:
  RoundedOperand(bool rows_final, size_t block_values) : row_by_row_(!std::is_same_v<S, G> && rows_final) {
    if (row_by_row_) rounded_.resize(block_values);
  }
  // Row r (cols values) of the block is final.
  void row_done(const S* row, int64_t r, int64_t cols) {
    if constexpr (!std::is_same_v<S, G>)
      if (row_by_row_) convert_from_float(row, rounded_.data() + r * cols, size_t(cols));
  }
  // The block (n values, every row done) as the operand.
  const G* operand(const S* block, int64_t n) { return row_by_row_ ? rounded_.data() : as_operand(block, n, rounded_); }

 private:
  bool row_by_row_;
  std::vector<G> rounded_;
};

// The output [..., L, Ev] of the compute type: uninitialised where forward_rows writes every row
// (there are keys), else zero. For 4-D q ([B, H, L, E]) it is stored as [B, L, H, Ev] and
// returned as that buffer's transpose(1, 2): merging the heads back,
// out.transpose(1, 2).reshape({B, L, H * Ev}), is then a view, not a copy.
template <class S>
Tensor output_of(const Tensor& q, const AttentionGeometry& g) {
  Shape shape = q.shape();
  shape.back() = g.Ev;
  const auto make = [&](Shape s) { return g.S > 0 ? empty(std::move(s), {.dtype = dtype_of<S>()}) : zeros(std::move(s), {.dtype = dtype_of<S>()}); };
  if (q.dim() != 4) return make(shape);
  const Tensor buffer = make({shape[0], shape[2], shape[1], shape[3]});  // [B, L, H, Ev]
  const Shape& stride = buffer.strides();
  // (An alias, not Tensor::transpose: that one is an op, a layer above the kernels.)
  return detail::alias(buffer, shape, {stride[0], stride[2], stride[1], stride[3]}, buffer.storage_offset());
}

// Where each batch entry's [L, S] mask starts, and its row and column strides: the mask may
// broadcast over any of the batch dims (a [T, T] causal mask, a [B, 1, 1, T] padding mask), so
// it is read in place through its strides, never expanded to [batch, L, S].
struct MaskLayout {
  const void* data = nullptr;
  std::vector<int64_t> batch_offset;
  int64_t row_stride = 0, col_stride = 0;
};

MaskLayout mask_layout(const Tensor& mask, const AttentionGeometry& g) {
  MaskLayout layout;
  if (!mask.defined()) return layout;
  const int n = mask.dim();
  layout.data = mask.raw_data();
  layout.row_stride = mask.strides()[n - 2];
  layout.col_stride = mask.strides()[n - 1];
  layout.batch_offset = batch_offsets(mask, g.batch);
  return layout;
}

// The block of scores S[r][c] = scale * (Q K^T)[r][c] + mask, -inf where causality hides the key;
// k_t is the key block's K_j^T.
template <class S, class G>
void scores_block(Rows<G> q, const SharedRhs<G>& k_t, const MaskLayout& mask, int64_t b, int64_t i0, int64_t rows,
                  int64_t j0, int64_t cols, const AttentionGeometry& g, S* block) {
  block_gemm<S, G>(cpu::matrix_view(q.row(i0), rows, g.E, q.stride, 1), k_t, block, false);
  const S scale = S(g.scale), minus_inf = -std::numeric_limits<S>::infinity();
  const S* m = mask.data ? static_cast<const S*>(mask.data) + mask.batch_offset[size_t(b)] : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    S* row = block + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] *= scale;
    if (m) {
      const S* mrow = m + (i0 + r) * mask.row_stride + j0 * mask.col_stride;
      for (int64_t c = 0; c < cols; ++c) row[c] += mrow[c * mask.col_stride];
    }
    if (g.causal)
      for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < cols; ++c) row[c] = minus_inf;
  }
}

// How many of a block row's scores causality leaves (the rest are -inf): all of them without it.
int64_t visible(int64_t i0, int64_t r, int64_t j0, int64_t cols, const AttentionGeometry& g) {
  return g.causal ? std::clamp<int64_t>(i0 + r + 1 - j0, 0, cols) : cols;
}

// row[c] = exp(row[c] - shift) for c < n, 0 from n to cols (the scores causality hid, whose exp
// is 0 exactly): f32 on the vectorised exp (kernels/cpu/vector_math.h).
template <class S>
void exp_shifted(S* row, int64_t n, int64_t cols, S shift) {
  if constexpr (std::is_same_v<S, float>) {
    cpu::exp_minus_f32(row, shift, row, n);
  } else {
    for (int64_t c = 0; c < n; ++c) row[c] = std::exp(row[c] - shift);
  }
  std::fill(row + n, row + cols, S(0));
}

// A row's maximum (std::max's rule, starting from init) and sum, for the online softmax, on
// kernels/cpu/float_lanes.h's vectors combined in a tree: as 16-lane loops of std::max
// (cpu::lane_max) GCC kept them scalar, and the lanes combined one after another (lane_sum in
// double) were two 15-step chains: forward_rows was 12% of bf16 attention's time at T = 1024. f64
// keeps lane_sum.h's order.
template <class S>
S row_max(const S* row, int64_t n, S init) {
  if constexpr (std::is_same_v<S, float>) return cpu::float_row_max(row, n, init, /*nan_wins=*/false);
  else return cpu::lane_max<S>(n, init, [row](int64_t c) { return row[c]; }, [](S a, S b) { return std::max(a, b); });
}
template <class S>
S row_sum(const S* row, int64_t n) {
  if constexpr (std::is_same_v<S, float>) return cpu::float_row_sum(row, n);
  else return S(cpu::lane_sum<S, 16>(n, [row](int64_t c) { return row[c]; }));
}

// The dropout factors of a block of probabilities: z[r][c] = 1 / (1 - p) where element
// n = (b L + i0 + r) S + j0 + c of the stream is kept, else 0 (each Philox block gives the 4
// elements n with the same n / 4, word n % 4, as kernels/dropout.cpp draws them).
template <class S>
void dropout_factors(int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols, const AttentionGeometry& g, S* z) {
  const math::Dropout rule{g.dropout_p};
  const uint32_t threshold = rule.keep_threshold();
  const S scale = rule.scale<S>();
  uint32_t words[4][philox::kBatch], draws[4 * philox::kBatch];  // kBatch blocks at once, on the vectorised rounds
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = (b * g.L + i0 + r) * g.S + j0, end = first + cols;  // the row's element numbers
    for (int64_t block0 = first / 4; block0 * 4 < end; block0 += philox::kBatch) {
      philox::generate_batch(g.dropout_seed, g.dropout_offset + uint64_t(block0), words);
      philox::draws_in_order(words, math::Dropout::kBits, draws);
      // The batch's elements that fall in the row: the first batch may start before it, the
      // last end after it. Bounds once per batch, so the loop below has no test but the keep one.
      const int64_t lo = std::max(first, block0 * 4), hi = std::min(end, (block0 + philox::kBatch) * 4);
      const uint32_t* draw = draws + (lo - block0 * 4);
      S* factor = z + r * cols + (lo - first);
      for (int64_t k = 0; k < hi - lo; ++k) factor[k] = draw[k] >= threshold ? scale : S(0);
    }
  }
}

// The key blocks a query block needs: with causality, none that starts after its last row.
int64_t key_end(int64_t i0, int64_t rows, const AttentionGeometry& g) {
  return g.causal ? std::min(g.S, i0 + rows) : g.S;
}

// The keys' blocks as shared right operands: K_j^T for the scores, V_j for P V.
template <class G>
struct KeyOperands {
  std::vector<SharedRhs<G>> k_t, v;
};
template <class G>
KeyOperands<G> key_operands(Rows<G> k, Rows<G> v, const AttentionGeometry& g) {
  return {key_blocks<G>(g, [&](int64_t j0, int64_t cols) { return cpu::matrix_view(k.row(j0), g.E, cols, 1, k.stride); }),
          key_blocks<G>(g, [&](int64_t j0, int64_t cols) { return cpu::matrix_view(v.row(j0), cols, g.Ev, v.stride, 1); })};
}

template <class S, class G>
void forward_rows(Rows<G> q, const KeyOperands<G>& keys, const MaskLayout& mask, int64_t b, int64_t i0, int64_t rows,
                  const AttentionGeometry& g, S* out, int64_t out_stride, S* lse) {
  const S minus_inf = -std::numeric_limits<S>::infinity();
  // (The block's buffer is the thread's, not zeroed: the scores' GEMM writes all of it. Zeroing a
  // fresh 36-64 KB per task was 1% of attention's time at T = 256.)
  thread_local std::vector<S> block;
  if (block.size() < size_t(rows * kBlock<G>)) block.resize(size_t(rows * kBlock<G>));
  std::vector<S> acc(size_t(rows * g.Ev), S(0));
  RoundedOperand<S, G> p_operand(g.dropout_p == 0, size_t(rows * kBlock<G>));  // (dropout scales P's rows later)
  std::vector<S> z(g.dropout_p > 0 ? size_t(rows * kBlock<G>) : 0);
  std::vector<S> m(size_t(rows), minus_inf), l(size_t(rows), S(0));
  for (int64_t j0 = 0; j0 < key_end(i0, rows, g); j0 += kBlock<G>) {
    const int64_t cols = std::min(kBlock<G>, g.S - j0);
    scores_block<S, G>(q, keys.k_t[size_t(j0 / kBlock<G>)], mask, b, i0, rows, j0, cols, g, block.data());
    for (int64_t r = 0; r < rows; ++r) {
      S* row = block.data() + r * cols;
      const int64_t n = visible(i0, r, j0, cols, g);
      // Max and sum in lanes: a single running value is a chain of dependent scalar operations,
      // slower than the exps themselves on a 64-key block.
      const S m_new = row_max(row, n, m[size_t(r)]);
      if (m_new == minus_inf) {  // every key so far masked out: nothing to add yet
        std::fill(row, row + cols, S(0));
        p_operand.row_done(row, r, cols);
        continue;
      }
      const S rescale = std::exp(m[size_t(r)] - m_new);  // 0 on the first unmasked block
      exp_shifted(row, n, cols, m_new);
      const S sum = row_sum(row, n);
      l[size_t(r)] = l[size_t(r)] * rescale + sum;
      m[size_t(r)] = m_new;
      if (rescale != S(1))
        for (int64_t d = 0; d < g.Ev; ++d) acc[size_t(r * g.Ev + d)] *= rescale;
      p_operand.row_done(row, r, cols);
    }
    if (g.dropout_p > 0) {  // after the row sums: softmax normalises the undropped probabilities
      dropout_factors(b, i0, rows, j0, cols, g, z.data());
      for (int64_t e = 0; e < rows * cols; ++e) block[size_t(e)] *= z[size_t(e)];
    }
    const G* p = p_operand.operand(block.data(), rows * cols);
    block_gemm<S, G>(cpu::matrix_view(p, rows, cols, cols, 1), keys.v[size_t(j0 / kBlock<G>)], acc.data(), true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    // A row whose keys are all masked has l = 0: its output is 0/0 = NaN and its lse -inf, as
    // PyTorch's softmax of a row of -inf.
    const S inv = S(1) / l[size_t(r)];
    for (int64_t d = 0; d < g.Ev; ++d) out[(i0 + r) * out_stride + d] = acc[size_t(r * g.Ev + d)] * inv;
    lse[i0 + r] = m[size_t(r)] + std::log(l[size_t(r)]);
  }
}

template <class S, class G>
std::pair<Tensor, Tensor> forward_typed(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                        const Tensor& mask_in, const AttentionGeometry& g) {
  const Operand<G> q = operand<G>(q_in, g.batch, g.L, g.E), k = operand<G>(k_in, g.batch, g.S, g.E),
                  v = operand<G>(v_in, g.batch, g.S, g.Ev);
  const MaskLayout mask = mask_layout(mask_in, g);
  Tensor out = output_of<S>(q_in, g);
  Tensor lse = full({g.batch, g.L}, -std::numeric_limits<double>::infinity(), {.dtype = dtype_of<S>()});
  const std::vector<int64_t> out_offsets = batch_offsets(out, g.batch);
  const int64_t out_stride = out.strides()[out.dim() - 2];
  S *op = out.data_ptr<S>(), *lp = lse.data_ptr<S>();
  // No keys (S = 0): the output is an empty sum, 0, as PyTorch's softmax(..) @ v.
  if (g.S > 0) {
    // Each batch entry's key blocks packed once, for all its query blocks.
    std::vector<KeyOperands<G>> keys(size_t(g.batch));
    parallel_for(0, g.batch, grain_for(g.S * (g.E + g.Ev)), [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) keys[size_t(b)] = key_operands<G>(k[b], v[b], g);
    });
    const int64_t blocks = (g.L + kBlock<G> - 1) / kBlock<G>;
    const int64_t cost = kBlock<G> * g.S * (g.E + g.Ev);  // multiply-adds per (batch, block) task
    parallel_for(0, g.batch * blocks, grain_for(cost), [&](int64_t first, int64_t last) {
      for (int64_t task = first; task < last; ++task) {
        const int64_t b = task / blocks, i0 = task % blocks * kBlock<G>;
        forward_rows<S, G>(q[b], keys[size_t(b)], mask, b, i0, std::min(kBlock<G>, g.L - i0), g,
                           op + out_offsets[size_t(b)], out_stride, lp + b * g.L);
      }
    });
  }
  return {out, lse};
}

// One batch entry's gradients: dq [L, E], dk [S, E], dv [S, Ev], every value written (each
// block's first product overwrites, later ones add; key blocks no query reaches are zeroed).
template <class S, class G>
void backward_one(Rows<G> q, Rows<G> k, Rows<G> v, Rows<S> o, Rows<G> dout, const S* lse, const MaskLayout& mask,
                  int64_t b, const AttentionGeometry& g, S* dq, S* dk, S* dv) {
  // D_i = rowsum(dO_i * O_i): the softmax backward's sum_j P_ij dP_ij, without P.
  // (Products first, then row_sum's lanes: one running sum was a chain of dependent adds, 4-5%
  // of f32 attention's time at T = 256.)
  std::vector<S> D(size_t(g.L)), products(size_t(g.Ev));
  for (int64_t i = 0; i < g.L; ++i) {
    const G* dout_row = dout.row(i);
    const S* o_row = o.row(i);
    for (int64_t d = 0; d < g.Ev; ++d) products[size_t(d)] = S(dout_row[d]) * o_row[d];
    D[size_t(i)] = row_sum(products.data(), g.Ev);
  }
  std::vector<S> p(size_t(kBlock<G> * kBlock<G>)), dp(size_t(kBlock<G> * kBlock<G>));
  const bool dropout = g.dropout_p > 0;
  std::vector<S> z(dropout ? p.size() : 0), pz(dropout ? p.size() : 0);  // the factors, P * Z
  // P (or P Z) and dS as operands (dropout scales P's rows, then dP's, after they are done)
  RoundedOperand<S, G> p_operand(!dropout, p.size()), ds_operand(!dropout, p.size());
  const S scale = S(g.scale);
  // The right operands every query block shares (K_j^T, V_j^T, K_j), packed once, and those every
  // key block of a query block shares (dO_i, Q_i), once per query block.
  const std::vector<SharedRhs<G>> k_t = key_blocks<G>(g, [&](int64_t j0, int64_t cols) {
    return cpu::matrix_view(k.row(j0), g.E, cols, 1, k.stride);
  });
  const std::vector<SharedRhs<G>> v_t = key_blocks<G>(g, [&](int64_t j0, int64_t cols) {
    return cpu::matrix_view(v.row(j0), g.Ev, cols, 1, v.stride);
  });
  const std::vector<SharedRhs<G>> k_rows = key_blocks<G>(g, [&](int64_t j0, int64_t cols) {
    return cpu::matrix_view(k.row(j0), cols, g.E, k.stride, 1);
  });
  std::vector<char> key_block_written(k_t.size(), 0);
  for (int64_t i0 = 0; i0 < g.L; i0 += kBlock<G>) {
    const int64_t rows = std::min(kBlock<G>, g.L - i0);
    if (g.S == 0) std::fill_n(dq + i0 * g.E, rows * g.E, S(0));  // (no keys: no products)
    const SharedRhs<G> dout_i = shared_rhs<G>(cpu::matrix_view(dout.row(i0), rows, g.Ev, dout.stride, 1));
    const SharedRhs<G> q_i = shared_rhs<G>(cpu::matrix_view(q.row(i0), rows, g.E, q.stride, 1));
    for (int64_t j0 = 0; j0 < key_end(i0, rows, g); j0 += kBlock<G>) {
      const int64_t cols = std::min(kBlock<G>, g.S - j0);
      const size_t j = size_t(j0 / kBlock<G>);
      scores_block<S, G>(q, k_t[j], mask, b, i0, rows, j0, cols, g, p.data());
      for (int64_t r = 0; r < rows; ++r) {
        exp_shifted(p.data() + r * cols, visible(i0, r, j0, cols, g), cols, lse[i0 + r]);
        p_operand.row_done(p.data() + r * cols, r, cols);
      }
      if (dropout) {
        dropout_factors(b, i0, rows, j0, cols, g, z.data());
        for (int64_t e = 0; e < rows * cols; ++e) pz[size_t(e)] = p[size_t(e)] * z[size_t(e)];
      }
      // dV_j += (P Z)^T dO_i; dP = dO_i V_j^T (times Z: the dropped probabilities' gradient)
      const G* pz_operand = p_operand.operand((dropout ? pz : p).data(), rows * cols);
      const bool key_block_seen = key_block_written[j] != 0;
      key_block_written[j] = 1;
      block_gemm<S, G>(cpu::matrix_view(pz_operand, cols, rows, 1, cols), dout_i, dv + j0 * g.Ev, key_block_seen);
      block_gemm<S, G>(cpu::matrix_view(dout.row(i0), rows, g.Ev, dout.stride, 1), v_t[j], dp.data(), false);
      if (dropout)
        for (int64_t e = 0; e < rows * cols; ++e) dp[size_t(e)] *= z[size_t(e)];
      // dS = P * (dP - D) (the softmax backward), times the scale the scores were multiplied by;
      // written over P, which is not needed any more.
      for (int64_t r = 0; r < rows; ++r) {
        S* ds_row = p.data() + r * cols;
        const S* dp_row = dp.data() + r * cols;
        const S d = D[size_t(i0 + r)];
        for (int64_t c = 0; c < cols; ++c) ds_row[c] = ds_row[c] * (dp_row[c] - d) * scale;
        ds_operand.row_done(ds_row, r, cols);
      }
      // dQ_i += dS K_j; dK_j += dS^T Q_i
      const G* ds = ds_operand.operand(p.data(), rows * cols);
      block_gemm<S, G>(cpu::matrix_view(ds, rows, cols, cols, 1), k_rows[j], dq + i0 * g.E, j0 > 0);
      block_gemm<S, G>(cpu::matrix_view(ds, cols, rows, 1, cols), q_i, dk + j0 * g.E, key_block_seen);
    }
  }
  for (size_t j = 0; j < key_block_written.size(); ++j) {
    if (key_block_written[j]) continue;
    const int64_t j0 = int64_t(j) * kBlock<G>, cols = std::min(kBlock<G>, g.S - j0);
    std::fill_n(dk + j0 * g.E, cols * g.E, S(0));
    std::fill_n(dv + j0 * g.Ev, cols * g.Ev, S(0));
  }
}

template <class S, class G>
std::array<Tensor, 3> backward_typed(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out_in,
                                     const Tensor& lse, const Tensor& grad_in, const Tensor& mask_in,
                                     const AttentionGeometry& g) {
  const Operand<G> q = operand<G>(q_in, g.batch, g.L, g.E), k = operand<G>(k_in, g.batch, g.S, g.E),
                  v = operand<G>(v_in, g.batch, g.S, g.Ev), grad = operand<G>(grad_in, g.batch, g.L, g.Ev);
  const Operand<S> out = operand<S>(out_in, g.batch, g.L, g.Ev);
  const MaskLayout mask = mask_layout(mask_in, g);
  Tensor dq = empty({g.batch, g.L, g.E}, {.dtype = dtype_of<S>()}), dk = empty({g.batch, g.S, g.E}, {.dtype = dtype_of<S>()}),
         dv = empty({g.batch, g.S, g.Ev}, {.dtype = dtype_of<S>()});
  const S* lp = lse.data_ptr<S>();
  S *dqp = dq.data_ptr<S>(), *dkp = dk.data_ptr<S>(), *dvp = dv.data_ptr<S>();
  // NOTE: one task per batch entry (batch x heads): dK and dV sum over every query block, so
  // splitting the query blocks over threads would need per-thread partial sums.
  const int64_t cost = 2 * g.L * g.S * (g.E + g.Ev);
  parallel_for(0, g.batch, grain_for(cost), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b)
      backward_one<S, G>(q[b], k[b], v[b], out[b], grad[b], lp + b * g.L, mask, b, g, dqp + b * g.L * g.E,
                      dkp + b * g.S * g.E, dvp + b * g.S * g.Ev);
  });
  if (q_in.dtype() != dtype_of<S>()) {
    dq = detail::copy_with_options(dq, {.dtype = q_in.dtype()});
    dk = detail::copy_with_options(dk, {.dtype = q_in.dtype()});
    dv = detail::copy_with_options(dv, {.dtype = q_in.dtype()});
  }
  return {dq, dk, dv};
}

}  // namespace

std::pair<Tensor, Tensor> attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                            const AttentionGeometry& g) {
  HG_CHECK(q.device().is_cpu(), "scaled_dot_product_attention: the fused kernel runs on the CPU");
  if (q.dtype() == f64) return forward_typed<double, double>(q, k, v, mask, g);
  if (q.dtype() == bf16) return forward_typed<float, bfloat16>(q, k, v, mask, g);
  if (q.dtype() == f16) return forward_typed<float, half>(q, k, v, mask, g);
  return forward_typed<float, float>(q, k, v, mask, g);
}

std::array<Tensor, 3> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& grad, const Tensor& mask,
                                         const AttentionGeometry& g) {
  if (q.dtype() == f64) return backward_typed<double, double>(q, k, v, out, lse, grad, mask, g);
  if (q.dtype() == bf16) return backward_typed<float, bfloat16>(q, k, v, out, lse, grad, mask, g);
  if (q.dtype() == f16) return backward_typed<float, half>(q, k, v, out, lse, grad, mask, g);
  return backward_typed<float, float>(q, k, v, out, lse, grad, mask, g);
}

}  // namespace hg::kernels
