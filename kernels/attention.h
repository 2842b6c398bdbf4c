// The fused attention kernels: dropout(softmax(Q K^T * scale + mask)) V without the T x T
// matrix. Declared here for the CPU (kernels/attention.cpp); kernels/cuda/attention.cu computes
// the same contract, dropout draws included, on a GPU (declared in kernels/cuda/cuda_kernels.h).
// FlashAttention-2's scheme: each block of query rows walks the key blocks once, keeping a running
// row maximum m, a running sum l and an unnormalised output; a new block whose maximum is larger
// rescales what came before by exp(m_old - m_new). The forward saves only the output and each
// row's log-sum-exp (m + log l): O(T * D) memory. The backward recomputes each block of
// probabilities from the log-sum-exp, P = exp(S - lse), instead of reading them back, and redraws
// the dropout mask from its counter-based generator (FlashAttention-2's dropout: the row sums and
// lse are those of the undropped P; D = rowsum(dO * O) holds with the dropped one).
//
// On the CPU the block products are halfgrad's GEMM (packed per CPU level); the rest is per-row scalar
// work in the compute type: f32 for f32/f16/bf16 inputs, f64 for f64. 16-bit inputs are multiplied
// as 16-bit operands, P and dS rounded to their dtype before their products, every product
// accumulating in f32 (FlashAttention-2's and PyTorch's CPU flash kernel's scheme).
#pragma once
#include <array>
#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace hg::kernels {

struct AttentionGeometry {
  int64_t batch;    // the product of the batch dims
  int64_t L, S;     // query and key lengths
  int64_t E, Ev;    // the q/k and v feature sizes
  double scale;
  bool causal;      // key j takes part in query row i only where j <= i (PyTorch's tril(ones(L, S)))
  // Dropout on the probabilities (0: none): probability (b, i, j) is kept, times 1 / (1 - p),
  // when the Philox draw of element n = (b L + i) S + j of the stream passes dropout's rule
  // (kernels/math/dropout.h) -- the mask dropout() would draw on the [batch, L, S] matrix of
  // probabilities from the same generator state, so the composed path gives the same result.
  double dropout_p = 0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// q [batch, L, E], k [batch, S, E], v [batch, S, Ev] of one floating dtype (any strides; `batch`
// the product of their leading dims). Compute-type operands whose last dim is contiguous are read
// in place, through their strides (nn::MultiheadAttention's heads are [B, H, T, D] views).
// `mask`, if defined, is an additive mask of the compute type (f32, or f64) whose last two dims
// are [L, S] and whose leading dims are `batch_shape` (any strides: 0 where it broadcasts).
// Returns the output [..., L, Ev] (q's shape, Ev last; for 4-D q [B, H, L, E] the transpose(1, 2)
// view of a contiguous [B, L, H, Ev], so that merging the heads back is free) and the row
// log-sum-exp [batch, L], both in the compute type:
// the backward wants the unrounded output (its rowsum(dO * O) cancels against dO V^T, and a
// 16-bit O there costs the q and k gradients more than one rounding).
std::pair<Tensor, Tensor> attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                            const AttentionGeometry& g);

// dq, dk, dv in q's dtype from the forward's inputs, its compute-type output and log-sum-exp, and
// the gradient of the output (any strides: read in place as the inputs are).
std::array<Tensor, 3> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& grad, const Tensor& mask,
                                         const AttentionGeometry& g);

}  // namespace hg::kernels
