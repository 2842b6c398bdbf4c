// scaled_dot_product_attention: checks, the mask made additive, then the fused kernel of q's
// device (kernels/attention.h on the CPU, kernels/cuda/attention.cu on a GPU; dropout included)
// with one recorded backward. On CUDA the composition of matmul, softmax and dropout remains for
// head sizes past the kernel's tiles (kernels::cuda::kAttentionMaxFeatures) and for deterministic
// mode (the fused backward sums dq with atomics).
#include "ops/attention.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/copy.h"
#include "core/determinism.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/masking.h"
#include "ops/record.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace hg {

Tensor attention_probabilities(const Tensor& q, const Tensor& k, const Tensor& additive_mask, bool is_causal,
                               double scale) {
  Tensor scores = matmul(q, k.transpose(-1, -2)) * scale;
  if (is_causal) {
    const int64_t L = q.shape()[q.dim() - 2], S = k.shape()[k.dim() - 2];
    scores = masked_fill(scores, triu(ones({L, S}, {.dtype = u8, .device = q.device()}), 1),
                         -std::numeric_limits<double>::infinity());
  }
  if (additive_mask.defined()) scores = scores + additive_mask;
  return softmax(scores, -1);
}

namespace {

constexpr std::string_view kName = "scaled_dot_product_attention";

Shape batch_dims(const Tensor& t) { return Shape(std::vector<int64_t>(t.shape().begin(), t.shape().end() - 2)); }

// The mask as values added to the scores, in `dtype`: a floating mask as it is, an integer one
// 0 where the key takes part and -inf where it does not. No gradient reaches it.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (is_floating(mask.dtype())) return mask.detach().to(dtype);
  return masked_fill(full(mask.shape(), -std::numeric_limits<double>::infinity(), {.dtype = dtype, .device = mask.device()}),
                     mask.detach(), 0.0);
}

// softmax(q k^T * scale + mask) v from differentiable ops: CUDA's path where the fused kernel is
// not (see the top of the file).
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                          double scale, double dropout_p) {
  Tensor p = attention_probabilities(q, k, mask, causal, scale);
  if (dropout_p > 0) p = dropout(p, dropout_p, true);
  return matmul(p, v);
}

// Whether q's device runs the fused kernels for these head sizes (the CPU's always does).
bool fused_kernel_runs(const Tensor& q, int64_t E, int64_t Ev) {
  if (q.device().is_cpu()) return true;
  return E <= kernels::cuda::kAttentionMaxFeatures && Ev <= kernels::cuda::kAttentionMaxFeatures &&
         !are_deterministic_algorithms_enabled();
}

std::pair<Tensor, Tensor> fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        const kernels::AttentionGeometry& g) {
  if (q.device().is_cpu()) return kernels::attention_forward(q, k, v, mask, g);
  return kernels::cuda::attention_forward(q, k, v, mask, g);
}

std::array<Tensor, 3> fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const Tensor& grad, const Tensor& mask,
                                     const kernels::AttentionGeometry& g) {
  if (q.device().is_cpu()) return kernels::attention_backward(q, k, v, out, lse, grad, mask, g);
  return kernels::cuda::attention_backward(q, k, v, out, lse, grad, mask, g);
}

// The kernel's output as the user's [..., L, Ev] in q's dtype. The CPU kernel returns that shape
// (for 4-D q a transposed view of [B, L, H, Ev], kernels/attention.h), CUDA's a contiguous
// [batch, L, Ev]; a 16-bit conversion keeps the CPU layout, so merging heads stays a view.
Tensor user_output(const Tensor& out3, const Shape& shape, TensorOptions options) {
  const Tensor shaped = out3.shape() == shape ? out3 : detail::dense_view(out3, shape);
  if (shaped.dtype() == options.dtype) return shaped;
  if (shaped.dim() == 4 && !shaped.is_contiguous())
    return detail::copy_with_options(shaped.transpose(1, 2), options).transpose(1, 2);
  return detail::copy_with_options(shaped, options);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    ScaledDotProductAttentionOptions options) {
  auto [q, k, v] = amp::prepare(amp::Op::ScaledDotProductAttention, q_in, k_in, v_in);
  HG_CHECK(q.defined() && k.defined() && v.defined(), kName, ": expected defined q, k and v");
  detail::check_same_device(kName, q, k);
  detail::check_same_device(kName, q, v);
  HG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), kName, ": expected q, k and v of one rank >= 2 "
           "([..., L, E], [..., S, E], [..., S, Ev]), got shapes ", q.shape(), ", ", k.shape(), " and ", v.shape());
  HG_CHECK(batch_dims(k) == batch_dims(q) && batch_dims(v) == batch_dims(q), kName,
           ": q, k and v must have the same batch dims, got shapes ", q.shape(), ", ", k.shape(), " and ", v.shape());
  const int n = q.dim();
  const int64_t L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1], Ev = v.shape()[n - 1];
  HG_CHECK(k.shape()[n - 1] == E, kName, ": q and k must have the same feature size, got ", E, " and ", k.shape()[n - 1]);
  HG_CHECK(v.shape()[n - 2] == S, kName, ": k and v must have the same length, got ", S, " and ", v.shape()[n - 2]);
  HG_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), kName,
           ": expected q, k and v of one floating dtype, got ", q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  HG_CHECK(options.dropout_p >= 0 && options.dropout_p <= 1, kName, ": dropout_p must be in [0, 1], got ",
           options.dropout_p);
  HG_CHECK(!(options.is_causal && options.attn_mask.defined()), kName,
           ": an explicit attn_mask should not be set with is_causal = true (the causal mask is built in)");
  const double scale = options.scale.value_or(1.0 / std::sqrt(double(E)));

  // The mask in the compute type (f64 for f64, f32 otherwise), broadcast (a view) to [..., L, S].
  Tensor mask;
  if (options.attn_mask.defined()) {
    detail::check_same_device(kName, q, options.attn_mask);
    Shape full_shape = batch_dims(q);
    full_shape.push_back(L);
    full_shape.push_back(S);
    broadcast_shapes(options.attn_mask.shape(), full_shape, kName);  // names the op when it does not broadcast
    const DType compute = q.dtype() == f64 ? f64 : f32;
    mask = expand(additive_mask(options.attn_mask, compute), full_shape);
    HG_CHECK(mask.shape() == full_shape, kName, ": attn_mask of shape ", options.attn_mask.shape(),
             " does not broadcast to the scores' shape ", full_shape);
  }
  if (!fused_kernel_runs(q, E, Ev))
    return attention_composed(q, k, v, mask.defined() ? mask.to(q.dtype()) : mask, options.is_causal, scale,
                              options.dropout_p);

  int64_t batch = 1;
  for (int d = 0; d < n - 2; ++d) batch *= q.shape()[d];
  kernels::AttentionGeometry g{batch, L, S, E, Ev, scale, options.is_causal};
  if (options.dropout_p > 0) {
    // The draws dropout() would take for the [batch, L, S] probabilities: the composed path and
    // this kernel keep the same elements, and the backward redraws them from the counters.
    const random::GeneratorState stream = random::reserve(uint64_t(batch * L * S));
    g.dropout_p = options.dropout_p, g.dropout_seed = stream.seed, g.dropout_offset = stream.offset;
  }
  // (Named, not a structured binding: lambdas may not capture those before clang 16.)
  const std::pair<Tensor, Tensor> forward = fused_forward(q, k, v, mask, g);
  const Tensor out3 = forward.first, lse = forward.second;
  Shape out_shape = q.shape();
  out_shape.back() = Ev;
  // The user's output in q's dtype; the backward keeps the compute-type one (the same tensor
  // unless q is 16-bit).
  Tensor out = user_output(out3, out_shape, q.options());
  record(amp::Op::ScaledDotProductAttention, out, {q, k, v},
         [sq = SavedTensor(q), sk = SavedTensor(k), sv = SavedTensor(v), so = SavedTensor(out3), lse, mask, g,
          shapes = std::vector<Shape>{q.shape(), k.shape(), v.shape()}](const Tensor& grad) {
           auto [dq, dk, dv] = fused_backward(sq.get(), sk.get(), sv.get(), so.get(), lse, grad, mask, g);
           return std::vector<Tensor>{detail::dense_view(dq, shapes[0]), detail::dense_view(dk, shapes[1]),
                                      detail::dense_view(dv, shapes[2])};
         });
  return out;
}

}  // namespace hg
