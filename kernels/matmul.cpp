// The GEMM kernels of matmul and linear, on the operands' device: halfgrad's packed CPU GEMM
// (kernels/cpu/gemm.h) or cuBLASLt (kernels/cuda/gemm.cpp). They record nothing.
#include "kernels/matmul.h"

#include "core/copy.h"
#include "core/fill.h"
#include "core/parallel.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/activation.h"
#include "kernels/reduce.h"
#include "kernels/vectorised_activation.h"

namespace hg::kernels {

namespace {

void batched_gemm_cpu(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t batches = out.dim() == 3 ? out.shape()[0] : 1;
  const int64_t M = out.shape()[out.dim() - 2], N = out.shape()[out.dim() - 1];
  const int64_t K = a.shape()[a.dim() - 1];
  const auto view_of = [](const Tensor& t, int64_t batch) {
    const int n = t.dim();
    const bool batched = n == 3 && t.shape()[0] > 1;
    const char* base = static_cast<const char*>(t.raw_data()) +
                       (batched ? batch * t.strides()[0] * int64_t(element_size(t.dtype())) : 0);
    return cpu::matrix_view(base, t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
  };
  const int64_t out_step = M * N * int64_t(element_size(out.dtype()));
  // NOTE: small matrices run one batch per thread; large ones let Eigen use the threads inside.
  const int64_t grain = M * N * K >= (int64_t(1) << 21) ? batches : 1;
  parallel_for(0, batches, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      cpu::gemm(out.dtype(), view_of(a, i), view_of(b, i), static_cast<char*>(out.raw_data()) + i * out_step, false);
  });
}

// A GEMM operand inside a kernel: t, or a contiguous copy (no autograd node: kernels record none).
Tensor gemm_operand(const Tensor& t) { return gemm_ready(t) ? t : detail::dense_copy(t); }

// The column sums of g2 (rows, out_features): linear's bias gradient.
Tensor column_sums(const Tensor& g2) { return reduce(ReduceKind::Sum, plan_reduction(g2, {0}, "linear"), false); }

}  // namespace

bool gemm_ready(const Tensor& t) {
  const int n = t.dim();
  return cpu::gemm_ready(t.shape()[n - 2], t.shape()[n - 1], t.strides()[n - 2], t.strides()[n - 1]);
}

void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.device().is_cuda()) kernels::cuda::batched_gemm(a, b, out);
  else batched_gemm_cpu(a, b, out);
}

Tensor linear(const Tensor& x2, const Tensor& w, const Tensor& b, bool relu, bool gelu, Tensor* pre_gelu) {
  HG_CHECK(!(relu && gelu), "internal error: linear asked for both relu and gelu");
  const int64_t rows = x2.shape()[0], in = x2.shape()[1], out_features = w.shape()[0];
  Tensor out = empty({rows, out_features}, x2.options());
  if (gelu && pre_gelu != nullptr) *pre_gelu = empty({rows, out_features}, x2.options());
  if (out.numel() == 0) return out;
  if (in > 0 && !x2.device().is_cuda()) {
    // The CPU GEMM adds the bias and applies relu as it stores each tile, gelu as it finishes
    // each block.
    const Tensor bias = b.defined() && !b.is_contiguous() ? detail::dense_copy(b) : b;
    const cpu::GemmEpilogue epilogue{.column_bias = bias.defined() ? bias.raw_data() : nullptr, .relu = relu,
                                     .gelu = gelu,
                                     .pre_gelu = gelu && pre_gelu != nullptr ? pre_gelu->raw_data() : nullptr};
    cpu::gemm(x2.dtype(), cpu::matrix_view(x2), cpu::matrix_view(gemm_operand(detail::transposed_view(w))),
              out.raw_data(), /*accumulate=*/false, epilogue);
    return out;
  }
  if (in == 0) {  // an empty sum: the bias alone
    if (b.defined()) detail::copy_into(out, b);  // (copy_into broadcasts the row)
    else detail::fill(out, 0.0);
  } else {
    kernels::cuda::linear_forward(x2, w, b, out);  // cuBLASLt adds the bias in its epilogue
  }
  // NOTE: relu is our own pass on the GPU, not cuBLASLt's RELU epilogue: that computes max(y, 0),
  // which turns NaN into 0 and would hide a diverged layer on the GPU only. GELU likewise, with
  // the CPU's formula.
  if (relu) kernels::map_into<1>(out, {out}, math::Forward<math::Relu>{});
  if (gelu) {
    if (pre_gelu != nullptr) detail::copy_into(*pre_gelu, out);
    // (the op gelu()'s own kernels: the vectorised one for a CPU in == 0 product)
    if (activation_vectorised(out)) out = gelu_forward_cpu(out);
    else kernels::map_into<1>(out, {out}, math::Forward<math::Gelu>{});
  }
  return out;
}

LinearWeightGrads linear_weight_grads(const Tensor& g2, const Tensor& x2, bool need_bias) {
  LinearWeightGrads r;
  const int64_t out_features = g2.shape()[1], in = x2.shape()[1];
  bool bias_done = false;
  if (g2.device().is_cuda() && g2.is_contiguous()) {
    // One cuBLASLt call: the weight gradient, and the bias gradient in its BGRADB epilogue.
    r.weight = empty({out_features, in}, x2.options());
    if (need_bias) r.bias = empty({out_features}, g2.options());
    bias_done = kernels::cuda::linear_weight_grad(g2, x2, r.weight, need_bias ? r.bias : Tensor()) && need_bias;
  } else {
    const bool empty_sum = g2.shape()[0] == 0;  // no rows: the gradient is 0, not garbage
    r.weight = empty_sum ? zeros({out_features, in}, x2.options()) : empty({out_features, in}, x2.options());
    if (r.weight.numel() > 0 && !empty_sum)
      batched_gemm(gemm_operand(detail::transposed_view(g2)), gemm_operand(x2), r.weight);
  }
  if (need_bias && !bias_done) r.bias = column_sums(g2);
  return r;
}

}  // namespace hg::kernels
