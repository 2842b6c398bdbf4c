// CUDA fused attention: kernels/attention.h's contract and the CPU kernel's scheme (FlashAttention-2),
// one thread block per (batch entry, block of query rows) in the forward and per (batch entry,
// block of key rows) in the backward. Every tile lives in shared memory: q, k, v and dO in the
// input type T, scores, probabilities and accumulators in the compute type A (f32 for f32, f16 and
// bf16; f64 for f64). The block products run on tensor cores (WMMA, f32 accumulators) for f16 and
// bf16, as FMA loops for f32 and f64; the softmax statistics m, l and lse are always A.
#include <mma.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "core/copy.h"
#include "core/cuda/device_math.cuh"
#include "core/determinism.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/math/dropout.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

constexpr int kAttentionThreads = 128;
constexpr int kAttentionWarps = kAttentionThreads / kWarp;

// Query and key rows per block. f16/bf16: 32, whole WMMA tiles (16 x 16 x 16), and a row pass
// gives each lane of a warp one key. The FMA types take fewer rows, 16 for f32 and 8 for f64, so
// that the backward's tiles at 128 features (k, v, q, dO, dK, dV, dQ: 90 KiB in bf16, 59 in f32
// and f64) fit the 99 KiB of shared memory a block may have on sm_86/sm_89 as well as on A100/H100.
template <class T> constexpr int kBlock = sizeof(T) == 2 ? 32 : sizeof(T) == 4 ? 16 : 8;

int round_up16(int64_t n) { return int((n + 15) / 16 * 16); }

// ---- device-side geometry -------------------------------------------------------------------------

// The mask (compute type, any strides, 0 where it broadcasts): the host's tensor strides, so each
// block finds its batch entry's [L, S] plane as kernels/attention.cpp's mask_layout does.
template <class A>
struct MaskView {
  const A* data = nullptr;
  int batch_dims = 0;
  int64_t sizes[kMaxDims] = {}, strides[kMaxDims] = {};
  int64_t row_stride = 0, col_stride = 0;

  __device__ const A* plane(int64_t b) const {
    if (!data) return nullptr;
    int64_t offset = 0;
    for (int d = batch_dims - 1; d >= 0; --d) {
      offset += b % sizes[d] * strides[d];
      b /= sizes[d];
    }
    return data + offset;
  }
};

template <class A>
struct AttentionParams {
  int64_t L, S, E, Ev;
  int E16, Ev16;  // E and Ev rounded up to whole WMMA tiles: the tiles' row lengths
  A scale;
  bool causal;
  MaskView<A> mask;
  // Dropout as kernels/attention.cpp's dropout_factors draws it: element n = (b L + i) S + j is
  // word n % 4 of Philox block offset + n / 4, kept when its top 24 bits reach keep_threshold.
  bool dropout = false;
  uint32_t keep_threshold = 0;
  A keep_scale = 1;
  uint64_t seed = 0, offset = 0;
};

template <class A>
__device__ A dropout_factor(const AttentionParams<A>& p, int64_t b, int64_t i, int64_t j) {
  const uint64_t n = uint64_t((b * p.L + i) * p.S + j);
  const philox::Block bits = philox::generate(p.seed, p.offset + n / 4);
  const uint32_t draw = bits.v[n % 4] >> (32 - math::Dropout::kBits);
  return draw >= p.keep_threshold ? p.keep_scale : A(0);
}

// Score (i, j) from its q k^T product: times the scale, plus the mask; -inf where causality hides
// the key and for the padding past L and S (whole tiles are computed, only the real part counts).
template <class A>
__device__ A masked_score(const AttentionParams<A>& p, const A* mask_plane, A qk, int64_t i, int64_t j) {
  if (i >= p.L || j >= p.S || (p.causal && j > i)) return -std::numeric_limits<A>::infinity();
  A s = qk * p.scale;
  if (mask_plane) s += mask_plane[i * p.mask.row_stride + j * p.mask.col_stride];
  return s;
}

// ---- block products in shared memory -------------------------------------------------------------

// Carves the dynamic shared memory into tiles, each 128-byte aligned (WMMA wants 32). The host
// runs the same carving without a base to size the launch.
struct SharedCarver {
  char* base = nullptr;
  size_t used = 0;

  template <class X>
  __host__ __device__ X* take(int64_t count) {
    used = (used + 127) / 128 * 128;
    X* tile = base ? reinterpret_cast<X*>(base + used) : nullptr;
    used += size_t(count) * sizeof(X);
    return tile;
  }
};

template <class T> using wmma_element = std::conditional_t<std::is_same_v<T, half>, __half, __nv_bfloat16>;

// Element (r, c) of a row-major tile, or of its transpose (the tile read column-major): how k^T,
// v^T, P^T and dS^T are read without a copy.
template <class T, bool kTransposed>
__device__ __forceinline__ acc_t<T> tile_at(const T* x, int ld, int r, int c) {
  return to_acc(kTransposed ? x[c * ld + r] : x[r * ld + c]);
}

// c (M x N, row-major, compute type) = [c +] a (M x K) b (K x N), a and b tiles of T read as
// tile_at does. Every thread of the block calls it. On tensor cores (M, N and K multiples of 16)
// each warp takes 16 x 16 tiles of c in turn; otherwise each thread takes elements.
template <class T, bool kTransposeA, bool kTransposeB>
__device__ void tile_product(const T* a, int lda, const T* b, int ldb, acc_t<T>* c, int ldc, int M, int N, int K,
                             bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  constexpr bool tensor_cores = std::is_same_v<T, half>;  // bf16 WMMA needs sm_80
#else
  constexpr bool tensor_cores = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
#endif
  if constexpr (tensor_cores) {
    namespace wmma = nvcuda::wmma;
    using E = wmma_element<T>;
    using LayoutA = std::conditional_t<kTransposeA, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kTransposeB, wmma::col_major, wmma::row_major>;
    const E* a16 = reinterpret_cast<const E*>(a);
    const E* b16 = reinterpret_cast<const E*>(b);
    const int tiles_n = N / 16;
    for (int tile = int(threadIdx.x) / kWarp; tile < M / 16 * tiles_n; tile += kAttentionWarps) {
      const int r0 = tile / tiles_n * 16, c0 = tile % tiles_n * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      if (accumulate) wmma::load_matrix_sync(acc, c + r0 * ldc + c0, unsigned(ldc), wmma::mem_row_major);
      else wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, E, LayoutA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, E, LayoutB> fb;
        wmma::load_matrix_sync(fa, a16 + (kTransposeA ? k0 * lda + r0 : r0 * lda + k0), unsigned(lda));
        wmma::load_matrix_sync(fb, b16 + (kTransposeB ? c0 * ldb + k0 : k0 * ldb + c0), unsigned(ldb));
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(c + r0 * ldc + c0, acc, unsigned(ldc), wmma::mem_row_major);
    }
  } else {
    for (int e = int(threadIdx.x); e < M * N; e += int(blockDim.x)) {
      const int r = e / N, col = e % N;
      acc_t<T> sum = accumulate ? c[r * ldc + col] : acc_t<T>(0);
      for (int k = 0; k < K; ++k) sum += tile_at<T, kTransposeA>(a, lda, r, k) * tile_at<T, kTransposeB>(b, ldb, k, col);
      c[r * ldc + col] = sum;
    }
  }
}

// tile[r][c] = src[r][c] for the rows x cols real part of a [tile_rows, ld] tile, zeros around it
// (a padded row or feature adds nothing to a product).
template <class T>
__device__ void load_tile(const T* src, int64_t rows, int64_t cols, T* tile, int tile_rows, int ld) {
  for (int e = int(threadIdx.x); e < tile_rows * ld; e += int(blockDim.x)) {
    const int r = e / ld, c = e % ld;
    tile[e] = r < rows && c < cols ? src[r * cols + c] : from_acc<T>(acc_t<T>(0));
  }
}

// The tiles of a kernel (ForwardTiles or BackwardTiles) in its dynamic shared memory.
template <class Tiles>
__device__ Tiles shared_tiles(int E16, int Ev16) {
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  SharedCarver carve{reinterpret_cast<char*>(shared_bytes)};
  return Tiles(carve, E16, Ev16);
}

// This thread block's batch entry b and its rows [start, start + count) of a length cut in
// blocks of B (queries in the forward, keys in the backward).
struct BlockRows {
  int64_t b, start, count;
};

template <int B>
__device__ BlockRows block_rows(int64_t length) {
  const int64_t blocks = (length + B - 1) / B;
  const int64_t b = int64_t(blockIdx.x) / blocks, start = int64_t(blockIdx.x) % blocks * B;
  return {b, start, std::min<int64_t>(B, length - start)};
}

template <class X>
__device__ void fill_shared(X* tile, int count, X value) {
  for (int e = int(threadIdx.x); e < count; e += int(blockDim.x)) tile[e] = value;
}

// ---- forward -----------------------------------------------------------------------------------

template <class T>
struct ForwardTiles {
  using A = acc_t<T>;
  T *q, *k, *v;   // [B, E16], [B, E16], [B, Ev16]
  A* scores;      // [B, B]
  T* probs;       // [B, B]: exp(S - m), dropped, in T for the product with v
  A* out;         // [B, Ev16]: the unnormalised output
  A *m, *l;       // [B]: running row maximum and sum

  __host__ __device__ ForwardTiles(SharedCarver& carve, int E16, int Ev16) {
    constexpr int B = kBlock<T>;
    q = carve.take<T>(B * E16), k = carve.take<T>(B * E16), v = carve.take<T>(B * Ev16);
    scores = carve.take<A>(B * B), probs = carve.take<T>(B * B), out = carve.take<A>(B * Ev16);
    m = carve.take<A>(B), l = carve.take<A>(B);
  }
};

// One key block of the online softmax, a warp per row and a lane per key: the new row maximum, the
// block's probabilities exp(S - m_new) (the row sum l counts them before dropout, as softmax
// normalises the undropped ones), and the output so far rescaled by exp(m_old - m_new).
template <class T>
__device__ void online_softmax_block(const ForwardTiles<T>& t, const AttentionParams<acc_t<T>>& p,
                                     const acc_t<T>* mask_plane, int64_t b, int64_t i0, int64_t j0) {
  using A = acc_t<T>;
  constexpr int B = kBlock<T>;
  constexpr A minus_inf = -std::numeric_limits<A>::infinity();
  const int lane = int(threadIdx.x) % kWarp;
  for (int r = int(threadIdx.x) / kWarp; r < B; r += kAttentionWarps) {
    const int64_t i = i0 + r, j = j0 + lane;
    const A s = lane < B ? masked_score(p, mask_plane, t.scores[r * B + lane], i, j) : minus_inf;
    const A m_old = t.m[r];
    const A m_new = math::nan_max(m_old, warp_max(s));
    A prob = 0, rescale = 1;
    if (m_new != minus_inf) {  // else every key so far is masked out: nothing to add yet
      rescale = exp(m_old - m_new);  // 0 on the first unmasked block
      prob = exp(s - m_new);
    }
    const A sum = warp_sum(prob);
    __syncwarp();  // every lane has read m[r] before lane 0 writes it
    if (lane == 0 && m_new != minus_inf) t.l[r] = t.l[r] * rescale + sum, t.m[r] = m_new;
    if (p.dropout && lane < B && i < p.L && j < p.S) prob *= dropout_factor(p, b, i, j);
    if (lane < B) t.probs[r * B + lane] = from_acc<T>(prob);
    for (int d = lane; d < p.Ev16; d += kWarp) t.out[r * p.Ev16 + d] *= rescale;
  }
}

// Block (b, i0): out [batch, L, Ev] and lse [batch, L] in the compute type.
template <class T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(const T* q, const T* k, const T* v, AttentionParams<acc_t<T>> p, acc_t<T>* out,
                             acc_t<T>* lse) {
  using A = acc_t<T>;
  constexpr int B = kBlock<T>;
  const ForwardTiles<T> t = shared_tiles<ForwardTiles<T>>(p.E16, p.Ev16);
  const auto [b, i0, rows] = block_rows<B>(p.L);
  const A* mask_plane = p.mask.plane(b);

  load_tile(q + (b * p.L + i0) * p.E, rows, p.E, t.q, B, p.E16);
  fill_shared(t.out, B * p.Ev16, A(0));
  fill_shared(t.m, B, -std::numeric_limits<A>::infinity());
  fill_shared(t.l, B, A(0));
  // With causality no key block past the last row's diagonal.
  const int64_t key_end = p.causal ? std::min(p.S, i0 + rows) : p.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += B) {
    const int64_t cols = std::min<int64_t>(B, p.S - j0);
    __syncthreads();  // the last block's products are done with k, v and probs
    load_tile(k + (b * p.S + j0) * p.E, cols, p.E, t.k, B, p.E16);
    load_tile(v + (b * p.S + j0) * p.Ev, cols, p.Ev, t.v, B, p.Ev16);
    __syncthreads();
    tile_product<T, false, true>(t.q, p.E16, t.k, p.E16, t.scores, B, B, B, p.E16, false);  // Q K^T
    __syncthreads();
    online_softmax_block(t, p, mask_plane, b, i0, j0);
    __syncthreads();
    tile_product<T, false, false>(t.probs, B, t.v, p.Ev16, t.out, p.Ev16, B, p.Ev16, B, true);  // += P V
  }
  __syncthreads();
  // A row whose keys are all masked has l = 0: its output is 0/0 = NaN and its lse -inf, as the
  // CPU kernel (and PyTorch's softmax of a row of -inf).
  for (int e = int(threadIdx.x); e < rows * p.Ev; e += int(blockDim.x)) {
    const int r = int(e / p.Ev), d = int(e % p.Ev);
    out[(b * p.L + i0 + r) * p.Ev + d] = t.out[r * p.Ev16 + d] * (A(1) / t.l[r]);
  }
  for (int r = int(threadIdx.x); r < rows; r += int(blockDim.x)) lse[b * p.L + i0 + r] = t.m[r] + log(t.l[r]);
}

// ---- backward ----------------------------------------------------------------------------------

// D_i = rowsum(dO_i * O_i), a warp per row: the softmax backward's sum_j P_ij dP_ij without P.
template <class T>
__global__ void attention_delta_kernel(const T* grad, const acc_t<T>* out, acc_t<T>* delta, int64_t rows, int64_t Ev) {
  using A = acc_t<T>;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    A total = 0;
    for (int64_t d = lane; d < Ev; d += kWarp) total += to_acc(grad[row * Ev + d]) * out[row * Ev + d];
    total = warp_sum(total);
    if (lane == 0) delta[row] = total;
  }
}

template <class T>
struct BackwardTiles {
  using A = acc_t<T>;
  T *k, *v, *q, *dout;  // [B, E16], [B, Ev16], [B, E16], [B, Ev16]
  A *lse, *delta;       // [B]
  A *probs, *dprobs;    // [B, B]: P = exp(S - lse) and dP = dO V^T
  T* product;           // [B, B]: P * Z, then dS, in T for the products
  A *dk, *dv, *dq;      // [B, E16], [B, Ev16], [B, E16]: this key block's sums, one query block's dQ

  __host__ __device__ BackwardTiles(SharedCarver& carve, int E16, int Ev16) {
    constexpr int B = kBlock<T>;
    k = carve.take<T>(B * E16), v = carve.take<T>(B * Ev16), q = carve.take<T>(B * E16), dout = carve.take<T>(B * Ev16);
    lse = carve.take<A>(B), delta = carve.take<A>(B);
    probs = carve.take<A>(B * B), dprobs = carve.take<A>(B * B), product = carve.take<T>(B * B);
    dk = carve.take<A>(B * E16), dv = carve.take<A>(B * Ev16), dq = carve.take<A>(B * E16);
  }
};

// P = exp(S - lse) from the recomputed scores (0 in the padding), and P * Z for dV's product.
template <class T>
__device__ void recompute_probabilities(const BackwardTiles<T>& t, const AttentionParams<acc_t<T>>& p,
                                        const acc_t<T>* mask_plane, int64_t b, int64_t i0, int64_t j0) {
  using A = acc_t<T>;
  constexpr int B = kBlock<T>;
  for (int e = int(threadIdx.x); e < B * B; e += int(blockDim.x)) {
    const int64_t i = i0 + e / B, j = j0 + e % B;
    const bool real = i < p.L && j < p.S;
    const A prob = real ? exp(masked_score(p, mask_plane, t.probs[e], i, j) - t.lse[e / B]) : A(0);
    t.probs[e] = prob;
    t.product[e] = from_acc<T>(p.dropout && real ? prob * dropout_factor(p, b, i, j) : prob);
  }
}

// dS = P * (dP Z - D) * scale: the softmax backward through the dropped probabilities, times the
// scale the scores were multiplied by (written over P * Z, which dV no longer needs).
template <class T>
__device__ void score_gradients(const BackwardTiles<T>& t, const AttentionParams<acc_t<T>>& p, int64_t b, int64_t i0,
                                int64_t j0) {
  using A = acc_t<T>;
  constexpr int B = kBlock<T>;
  for (int e = int(threadIdx.x); e < B * B; e += int(blockDim.x)) {
    const int64_t i = i0 + e / B, j = j0 + e % B;
    A dprob = t.dprobs[e];
    if (p.dropout && i < p.L && j < p.S) dprob *= dropout_factor(p, b, i, j);
    t.product[e] = from_acc<T>(t.probs[e] * (dprob - t.delta[e / B]) * p.scale);
  }
}

// Block (b, j0): dK and dV of its keys summed over the query blocks in shared memory; each query
// block's dQ added to dq_sum (compute type, [batch, L, E]) with atomics, as blocks of other keys
// add to the same rows.
template <class T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_kernel(const T* q, const T* k, const T* v, const T* dout, const acc_t<T>* lse,
                              const acc_t<T>* delta, AttentionParams<acc_t<T>> p, acc_t<T>* dq_sum, T* dk, T* dv) {
  using A = acc_t<T>;
  constexpr int B = kBlock<T>;
  const BackwardTiles<T> t = shared_tiles<BackwardTiles<T>>(p.E16, p.Ev16);
  const auto [b, j0, cols] = block_rows<B>(p.S);
  const A* mask_plane = p.mask.plane(b);

  load_tile(k + (b * p.S + j0) * p.E, cols, p.E, t.k, B, p.E16);
  load_tile(v + (b * p.S + j0) * p.Ev, cols, p.Ev, t.v, B, p.Ev16);
  fill_shared(t.dk, B * p.E16, A(0));
  fill_shared(t.dv, B * p.Ev16, A(0));
  // With causality the query blocks above the diagonal see none of these keys (blocks of queries
  // and keys have one size, so the first one that does starts at j0).
  for (int64_t i0 = p.causal ? j0 : 0; i0 < p.L; i0 += B) {
    const int64_t rows = std::min<int64_t>(B, p.L - i0);
    __syncthreads();  // the last query block is done with q, dO and the products
    load_tile(q + (b * p.L + i0) * p.E, rows, p.E, t.q, B, p.E16);
    load_tile(dout + (b * p.L + i0) * p.Ev, rows, p.Ev, t.dout, B, p.Ev16);
    for (int r = int(threadIdx.x); r < B; r += int(blockDim.x)) {
      t.lse[r] = r < rows ? lse[b * p.L + i0 + r] : A(0);
      t.delta[r] = r < rows ? delta[b * p.L + i0 + r] : A(0);
    }
    __syncthreads();
    tile_product<T, false, true>(t.q, p.E16, t.k, p.E16, t.probs, B, B, B, p.E16, false);  // S = Q K^T
    __syncthreads();
    recompute_probabilities(t, p, mask_plane, b, i0, j0);
    __syncthreads();
    tile_product<T, true, false>(t.product, B, t.dout, p.Ev16, t.dv, p.Ev16, B, p.Ev16, B, true);    // dV += (P Z)^T dO
    tile_product<T, false, true>(t.dout, p.Ev16, t.v, p.Ev16, t.dprobs, B, B, B, p.Ev16, false);  // dP = dO V^T
    __syncthreads();
    score_gradients(t, p, b, i0, j0);
    __syncthreads();
    tile_product<T, true, false>(t.product, B, t.q, p.E16, t.dk, p.E16, B, p.E16, B, true);  // dK += dS^T Q
    tile_product<T, false, false>(t.product, B, t.k, p.E16, t.dq, p.E16, B, p.E16, B, false);  // dQ = dS K
    __syncthreads();
    for (int e = int(threadIdx.x); e < rows * p.E; e += int(blockDim.x)) {
      const int r = int(e / p.E), d = int(e % p.E);
      atomicAdd(dq_sum + (b * p.L + i0 + r) * p.E + d, t.dq[r * p.E16 + d]);
    }
  }
  __syncthreads();
  for (int e = int(threadIdx.x); e < cols * p.E; e += int(blockDim.x))
    dk[(b * p.S + j0) * p.E + e] = from_acc<T>(t.dk[e / p.E * p.E16 + e % p.E]);
  for (int e = int(threadIdx.x); e < cols * p.Ev; e += int(blockDim.x))
    dv[(b * p.S + j0) * p.Ev + e] = from_acc<T>(t.dv[e / p.Ev * p.Ev16 + e % p.Ev]);
}

// ---- host side ---------------------------------------------------------------------------------

constexpr std::string_view kOp = "scaled_dot_product_attention";

template <class A>
AttentionParams<A> make_params(const AttentionGeometry& g, const Tensor& mask) {
  HG_CHECK(g.E <= kAttentionMaxFeatures && g.Ev <= kAttentionMaxFeatures, kOp, ": the CUDA kernel takes at most ",
           kAttentionMaxFeatures, " features per head, got E = ", g.E, " and Ev = ", g.Ev);
  AttentionParams<A> p{.L = g.L, .S = g.S, .E = g.E, .Ev = g.Ev, .E16 = round_up16(g.E), .Ev16 = round_up16(g.Ev),
                       .scale = A(g.scale), .causal = g.causal, .mask = {}};
  if (mask.defined()) {
    const int n = mask.dim();
    HG_CHECK(mask.dtype() == dtype_of<A>() && n - 2 <= kMaxDims, kOp, ": the CUDA kernel wants a ", dtype_of<A>(),
             " mask of at most ", kMaxDims + 2, " dims, got ", mask.dtype(), " ", mask.shape());
    p.mask.data = mask.data_ptr<A>();
    p.mask.batch_dims = n - 2;
    for (int d = 0; d < n - 2; ++d) p.mask.sizes[d] = mask.shape()[d], p.mask.strides[d] = mask.strides()[d];
    p.mask.row_stride = mask.strides()[n - 2], p.mask.col_stride = mask.strides()[n - 1];
  }
  if (g.dropout_p > 0) {
    const math::Dropout rule{g.dropout_p};
    p.dropout = true, p.keep_threshold = rule.keep_threshold(), p.keep_scale = rule.scale<A>();
    p.seed = g.dropout_seed, p.offset = g.dropout_offset;
  }
  return p;
}

// t contiguous in its own dtype, seen as [batch, rows, cols].
Tensor dense_3d(const Tensor& t, int64_t batch, int64_t rows, int64_t cols) {
  return detail::dense_view(detail::dense(t), {batch, rows, cols});
}

// A grid of `blocks` blocks of the kernel with `shared` bytes of dynamic shared memory (past the
// 48 KiB default, which needs the kernel's opt-in).
template <class Kernel>
int64_t prepare_launch(Kernel kernel, size_t shared, int64_t blocks) {
  int device = 0, limit = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  HG_CHECK(shared <= size_t(limit), kOp, ": the CUDA kernel needs ", shared,
           " bytes of shared memory per block at these feature sizes; the device offers ", limit);
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
  HG_CHECK(blocks <= int64_t(std::numeric_limits<int32_t>::max()), kOp, ": ", blocks, " thread blocks is too many");
  return blocks;
}

}  // namespace

std::pair<Tensor, Tensor> attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                            const Tensor& mask, const AttentionGeometry& g) {
  detail::check_cuda_device(q_in.device(), kOp);
  return visit_floating(q_in.dtype(), kOp, [&]<class T> {
    using A = acc_t<T>;
    const TensorOptions options{.dtype = dtype_of<A>(), .device = q_in.device()};
    Tensor out = zeros({g.batch, g.L, g.Ev}, options);
    Tensor lse = full({g.batch, g.L}, -std::numeric_limits<double>::infinity(), options);
    // No keys (S = 0): the output is an empty sum, 0, as on the CPU.
    if (g.batch * g.L == 0 || g.S == 0) return std::pair{out, lse};
    const AttentionParams<A> p = make_params<A>(g, mask);
    const Tensor q = dense_3d(q_in, g.batch, g.L, g.E), k = dense_3d(k_in, g.batch, g.S, g.E),
                 v = dense_3d(v_in, g.batch, g.S, g.Ev);
    SharedCarver carve;
    (void)ForwardTiles<T>(carve, p.E16, p.Ev16);
    const int64_t blocks = prepare_launch(attention_forward_kernel<T>, carve.used,
                                          g.batch * ((g.L + kBlock<T> - 1) / kBlock<T>));
    attention_forward_kernel<T><<<unsigned(blocks), kAttentionThreads, carve.used>>>(
        q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), p, out.data_ptr<A>(), lse.data_ptr<A>());
    HG_CHECK_LAUNCH("attention_forward_kernel");
    return std::pair{out, lse};
  });
}

std::array<Tensor, 3> attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                         const Tensor& out_in, const Tensor& lse_in, const Tensor& grad_in,
                                         const Tensor& mask, const AttentionGeometry& g) {
  detail::check_cuda_device(q_in.device(), kOp);
  detail::alert_nondeterministic("scaled_dot_product_attention backward on CUDA (dq summed with atomicAdd)");
  return visit_floating(q_in.dtype(), kOp, [&]<class T> {
    using A = acc_t<T>;
    const TensorOptions options{.dtype = dtype_of<A>(), .device = q_in.device()};
    Tensor dq_sum = zeros({g.batch, g.L, g.E}, options);
    Tensor dk = zeros({g.batch, g.S, g.E}, q_in.options()), dv = zeros({g.batch, g.S, g.Ev}, q_in.options());
    if (g.batch * g.L != 0 && g.S != 0) {
      const AttentionParams<A> p = make_params<A>(g, mask);
      const Tensor q = dense_3d(q_in, g.batch, g.L, g.E), k = dense_3d(k_in, g.batch, g.S, g.E),
                   v = dense_3d(v_in, g.batch, g.S, g.Ev), out = dense_3d(out_in, g.batch, g.L, g.Ev),
                   lse = detail::dense(lse_in);
      const Tensor grad = dense_3d(
          grad_in.dtype() == q_in.dtype() ? grad_in : detail::copy_with_options(grad_in, q_in.options()), g.batch, g.L, g.Ev);
      Tensor delta = empty({g.batch, g.L}, options);
      attention_delta_kernel<T><<<blocks_for(g.batch * g.L * kWarp), kThreads>>>(
          grad.data_ptr<T>(), out.data_ptr<A>(), delta.data_ptr<A>(), g.batch * g.L, g.Ev);
      HG_CHECK_LAUNCH("attention_delta_kernel");
      SharedCarver carve;
      (void)BackwardTiles<T>(carve, p.E16, p.Ev16);
      const int64_t blocks = prepare_launch(attention_backward_kernel<T>, carve.used,
                                            g.batch * ((g.S + kBlock<T> - 1) / kBlock<T>));
      attention_backward_kernel<T><<<unsigned(blocks), kAttentionThreads, carve.used>>>(
          q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), grad.data_ptr<T>(), lse.data_ptr<A>(),
          delta.data_ptr<A>(), p, dq_sum.data_ptr<A>(), dk.data_ptr<T>(), dv.data_ptr<T>());
      HG_CHECK_LAUNCH("attention_backward_kernel");
    }
    Tensor dq = dq_sum.dtype() == q_in.dtype() ? dq_sum : detail::copy_with_options(dq_sum, q_in.options());
    return std::array<Tensor, 3>{dq, dk, dv};
  });
}

}  // namespace hg::kernels::cuda
