// The CUDA kernels' entry points that the op families call when a tensor is on a GPU. Defined in
// kernels/cuda/*.cu in a CUDA build; in a CPU-only build (core/no_cuda/) each throws
// hg::Error("... built without CUDA").
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/conv.h"
#include "kernels/math/optimizer_step.h"
#include "kernels/math/interpolate.h"
#include "kernels/math/pool.h"
#include "kernels/reduce.h"

namespace hg::kernels::cuda {

using kernels::ReduceKind;
// x viewed as contiguous (outer, reduce, inner) -> out (outer, inner).
void reduce(ReduceKind kind, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduce, int64_t inner);

// out[b] = a[b] @ b[b] through cuBLASLt (2-D operands broadcast over the batch).
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out);
// out (rows, out_features) = x2 @ w^T (+ bias), the bias fused as a cuBLASLt epilogue. (A ReLU
// epilogue is applied afterwards with relu's own functor: cuBLASLt's RELU epilogue maps NaN to 0.)
void linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias, const Tensor& out);
// linear's weight gradient grad_w = g2^T @ x2; also writes the bias gradient (the column sums of
// g2) through the BGRADB epilogue when cuBLASLt has a kernel for it -- returns whether it did.
bool linear_weight_grad(const Tensor& g2, const Tensor& x2, const Tensor& grad_w, const Tensor& grad_bias);

// conv2d through cuDNN (stride, padding, dilation and groups from g); undefined gradient outputs
// are skipped.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out, const ConvGeometry& g);
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& grad, const ConvGeometry& g,
                     const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias);

// softmax / log_softmax of contiguous x viewed as (outer, D, inner) along D.
void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t D, int64_t inner, bool log);
void softmax_backward(const Tensor& y, const Tensor& g, const Tensor& dx, int64_t outer, int64_t D, int64_t inner, bool log);

// Fused softmax + NLL with label smoothing. The targets are checked on the device: one outside
// [0, C) (and not ignore_index) is reported through the device error slot -- an hg::Error at the
// next synchronisation -- and its row is ignored. Returns the 0-d mean loss over the rows that
// count and sets `valid` to their number (0-d i64, on the device); the backward writes
// d(loss)/d(logits) scaled by g (0-d), reading both on the device.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, double label_smoothing, int64_t ignore_index,
                             Tensor& valid);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_output,
                            double label_smoothing, int64_t ignore_index, const Tensor& valid, const Tensor& grad_logits);

// Pooling on contiguous NCHW tensors; `where` (u8) holds each maximum's index in its window
// (i * kernel + j).
void max_pool2d_forward(const Tensor& x, const Tensor& out, const Tensor& where, const math::PoolGeometry& g);
void max_pool2d_backward(const Tensor& grad, const Tensor& where, const Tensor& grad_x, const math::PoolGeometry& g);
void avg_pool2d_forward(const Tensor& x, const Tensor& out, const math::PoolGeometry& g);
void avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x, const math::PoolGeometry& g);
void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& out);
void adaptive_avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x);
void interpolate_forward(const Tensor& x, const Tensor& out, const math::Resize& r);
void interpolate_backward(const Tensor& grad, const Tensor& grad_x, const math::Resize& r);
void adaptive_max_pool2d_forward(const Tensor& x, const Tensor& out, const Tensor& where);
void adaptive_max_pool2d_backward(const Tensor& grad, const Tensor& where, const Tensor& grad_x);

// out[i] = keep(i) ? in[i] / (1 - p) : 0 with keep(i) = Philox uniform(seed, offset + i) >= p:
// bitwise the same mask as the CPU.
void dropout(const Tensor& in, const Tensor& out, double p, uint64_t seed, uint64_t offset);

// Fused attention (kernels/cuda/attention.cu): the contract of kernels/attention.h (compute-type
// output [batch, L, Ev] and row log-sum-exp [batch, L]; dq, dk, dv in q's dtype), the same dropout
// draws, so one generator state gives the CPU's mask. The kernels hold a block of q rows and of k/v
// rows in shared memory whole, so E and Ev are at most kAttentionMaxFeatures; ops/attention.cpp
// takes the composed path (matmul, softmax, dropout) beyond that.
constexpr int64_t kAttentionMaxFeatures = 128;
std::pair<Tensor, Tensor> attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                            const AttentionGeometry& g);
std::array<Tensor, 3> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& grad, const Tensor& mask,
                                         const AttentionGeometry& g);

// ---- GPU AMP: multi-tensor kernels that read and write device flags, never the host ----

// For every gradient (contiguous, one launch per dtype): flags non-finite values into found_inf
// (0-d f32) and nonfinite[i] (i32 per gradient), counts f16 zero/subnormal elements into tiny
// (0-d i64), and multiplies by 1/scale (computed in f64 from the device scale) unless
// check_only[i].
void unscale_and_check(const std::vector<Tensor>& grads, const std::vector<bool>& check_only, const Tensor& scale,
                       const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny);
// The GradScaler update rule on the device (one thread): backoff on found_inf, growth after
// growth_interval clean steps, clamped to [min_scale, max_scale] and to finite f32.
// `skipped_mirror` (device address of mapped host memory, or null) receives the new
// skipped_in_a_row too, for the host to poll without waiting.
void scaler_update(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped_in_a_row,
                   const Tensor& found_inf, double growth_factor, double backoff_factor, int64_t growth_interval,
                   double min_scale, double max_scale, int32_t* skipped_mirror);

using SgdHyper = math::SgdStep;  // the update rule is its own parameter pack (kernels/math/optimizer_step.h)
using AdamHyper = math::AdamStep;
// Multi-tensor optimizer updates. weights[i] is the parameter or its f32 master; params[i] is
// the parameter (written with the rounded master when it differs from weights[i]); grads[i] in
// the weight's or the parameter's dtype; `scale` (maybe undefined) unscales deferred gradients;
// nothing changes where found_inf (maybe undefined) is nonzero. SGD's momentum_ready[i] (0-d i32,
// undefined without momentum) is 0 until the buffer holds a value: that step sets the buffer to
// the gradient (PyTorch's first-step rule). Adam's steps[i] (0-d i64) counts applied steps.
void sgd_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum, const std::vector<Tensor>& momentum_ready, const SgdHyper& h,
                const Tensor& found_inf, const Tensor& scale);
void adam_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq, const std::vector<Tensor>& steps,
                 const AdamHyper& h, const Tensor& found_inf, const Tensor& scale);
// RMSprop, Adagrad, Adadelta (kernels/math/optimizer_step.h): slots[i] holds parameter i's three
// state slots (undefined: scratch); Adagrad's steps[i] (0-d i64) counts its applied steps.
void rmsprop_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                    const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                    const math::RmspropStep& h, const Tensor& found_inf, const Tensor& scale);
void adagrad_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                    const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                    const std::vector<Tensor>& steps, const math::AdagradStep& h, const Tensor& found_inf,
                    const Tensor& scale);
void adadelta_update(const std::vector<Tensor>& weights, const std::vector<Tensor>& params,
                     const std::vector<Tensor>& grads, const std::vector<std::array<Tensor, 3>>& slots,
                     const math::AdadeltaStep& h, const Tensor& found_inf, const Tensor& scale);
// After the updates of one step, unless found_inf (maybe undefined) is set: steps[i] (0-d i64)
// += 1, flags[i] (0-d i32, may be undefined) = 1, applied (0-d i64) += 1.
void advance_step_counts(const std::vector<Tensor>& steps, const std::vector<Tensor>& flags, const Tensor& applied,
                         const Tensor& found_inf);

// batch_norm of contiguous x (N, C, ...): computes (training) or reads (eval) the per-channel
// statistics on the device, updates the running statistics in place (training; unbiased
// variance, like PyTorch), writes y in x's dtype; returns y and sets mean/rstd (f32, (C)) for the
// backward. weight/bias/running stats may be undefined.
Tensor batch_norm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                          const Tensor& bias, bool training, double momentum, double eps, Tensor& mean, Tensor& rstd);
// Sets dx (x's dtype) and dw, db (weight's dtype, or f32 without weight).
void batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         bool training, Tensor& dx, Tensor& dw, Tensor& db);

// layer_norm of contiguous x viewed as (rows, D); mean/rstd are f32 (rows).
Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t D, double eps,
                          Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         int64_t rows, int64_t D, Tensor& dx, Tensor& dw, Tensor& db);

// embedding rows for i64 or i32 indices. The indices are checked on the device: one outside
// [0, rows) is reported through the device error slot (an hg::Error at the next
// synchronisation), its output row is zeros and the backward skips it. The backward adds with
// atomics, so it calls detail::alert_nondeterministic first.
void embedding_forward(const Tensor& indices, const Tensor& weight, const Tensor& out);
void embedding_backward(const Tensor& indices, const Tensor& grad, const Tensor& grad_weight);

}  // namespace hg::kernels::cuda
