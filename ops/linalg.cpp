// matmul and linear: shape checks, batching and broadcasting around the GEMM kernels of
// kernels/matmul.h (the packed CPU GEMM, or cuBLASLt on a GPU). Backwards are matmuls of the gradient
// with transposed views of the saved operands (no copies).
#include "ops/linalg.h"

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "autograd/node.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/activation.h"
#include "kernels/matmul.h"
#include "kernels/vectorised_activation.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/fp8_ops.h"
#include "ops/reduce.h"
#include "ops/record.h"
#include "ops/shape.h"

namespace hg {


namespace {

std::string dims_text(const Tensor& t) {
  std::string s;
  for (int d = 0; d < t.dim(); ++d) {
    if (d > 0) s += 'x';
    s += std::to_string(t.shape()[d]);
  }
  return s;
}

// A GEMM operand: `t` itself when its rows or columns are contiguous, else a contiguous copy
// (a differentiable one: the copy is what the op records as its input).
Tensor gemm_operand(const Tensor& t) { return kernels::gemm_ready(t) ? t : t.contiguous(); }

}  // namespace

// ---- matmul --------------------------------------------------------------------------------------

namespace {
Tensor matmul_prepared(const Tensor& a0, const Tensor& b0);
}

namespace {

int64_t product(const Shape& shape, int first, int last) {
  int64_t n = 1;
  for (int d = first; d < last; ++d) n *= shape[d];
  return n;
}

// One operand of a batched product as (batch, rows, cols): a view when its batch dims are the
// result's (or it has none that count), a copy of the broadcast otherwise.
Tensor as_batch_of_matrices(const Tensor& t, const Shape& batch) {
  const int n = t.dim();
  const int64_t rows = t.shape()[n - 2], cols = t.shape()[n - 1];
  if (product(t.shape(), 0, n - 2) == 1) return t.reshape({rows, cols});  // broadcast by the kernel
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  return expand(t, full).reshape({product(batch, 0, int(batch.size())), rows, cols});
}

// Operands of rank >= 2: the batch dims (all but the last two) broadcast, as PyTorch's; the
// product runs as one 3-D batched GEMM (or one 2-D GEMM when only one side has a batch).
Tensor matmul_matrices(const Tensor& a, const Tensor& b) {
  if (a.dim() <= 3 && b.dim() <= 3) return matmul_prepared(a, b);
  HG_CHECK(a.shape()[a.dim() - 1] == b.shape()[b.dim() - 2], "matmul: mat1 and mat2 shapes cannot be multiplied (",
           dims_text(a), " and ", dims_text(b), ")");
  const Shape batch_a(std::vector<int64_t>(a.shape().begin(), a.shape().end() - 2));
  const Shape batch_b(std::vector<int64_t>(b.shape().begin(), b.shape().end() - 2));
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul (batch dimensions)");
  Tensor out = matmul_prepared(as_batch_of_matrices(a, batch), as_batch_of_matrices(b, batch));
  Shape shape = batch;
  shape.push_back(a.shape()[a.dim() - 2]);
  shape.push_back(b.shape()[b.dim() - 1]);
  return out.reshape(shape);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (amp::fp8_enabled()) return amp::detail::fp8_matmul(a_in, b_in);  // (ops/fp8_ops.h)
  auto [a0, b0] = amp::prepare(amp::Op::Matmul, a_in, b_in);
  HG_CHECK(a0.dim() >= 1 && b0.dim() >= 1, "matmul: both operands need at least one dimension, got shapes ",
           a0.shape(), " and ", b0.shape());
  if (a0.dim() >= 2 && b0.dim() >= 2) return matmul_matrices(a0, b0);
  // A vector is a one-row (left) or one-column (right) matrix whose added dim leaves the result,
  // as in PyTorch: [K] @ [K] is a 0-d dot product, [B, M, K] @ [K] is [B, M].
  Tensor out = matmul_matrices(a0.dim() == 1 ? unsqueeze(a0, 0) : a0, b0.dim() == 1 ? unsqueeze(b0, -1) : b0);
  if (a0.dim() == 1) out = squeeze(out, -2);
  if (b0.dim() == 1) out = squeeze(out, -1);
  return out;
}

namespace {
Tensor matmul_prepared(const Tensor& a0, const Tensor& b0) {
  detail::check_same_device("matmul", a0, b0);
  HG_CHECK(a0.shape()[a0.dim() - 1] == b0.shape()[b0.dim() - 2], "matmul: mat1 and mat2 shapes cannot be multiplied (",
           dims_text(a0), " and ", dims_text(b0), ")");
  const DType dtype = promote_types(a0.dtype(), b0.dtype());
  HG_CHECK(is_floating(dtype), "matmul: expected floating operands, got ", a0.dtype(), " and ", b0.dtype());
  if (a0.dim() == 3 && b0.dim() == 2) {
    // (B,M,K)@(K,N) is one (B*M,K)@(K,N) GEMM; its backward then sums over the batch inside the
    // GEMM's f32 accumulator instead of rounding B partial products.
    const int64_t B = a0.shape()[0], M = a0.shape()[1];
    return matmul_prepared(a0.reshape({B * M, a0.shape()[2]}), b0).reshape({B, M, b0.shape()[1]});
  }
  const Tensor a = gemm_operand(a0.to(dtype)), b = gemm_operand(b0.to(dtype));
  Shape shape{a.shape()[a.dim() - 2], b.shape()[b.dim() - 1]};
  if (a.dim() == 3 || b.dim() == 3) {
    const int64_t ba = a.dim() == 3 ? a.shape()[0] : 1, bb = b.dim() == 3 ? b.shape()[0] : 1;
    HG_CHECK(ba == bb || ba == 1 || bb == 1, "matmul: batch sizes ", ba, " and ", bb, " differ (shapes ", a.shape(),
             " and ", b.shape(), ")");
    shape.insert(shape.begin(), std::max(ba, bb));
    if (ba == 0 || bb == 0) shape[0] = 0;
  }
  // The GEMM writes every element (beta = 0): no zero-fill first, except for K = 0, an empty sum
  // that must give 0, not garbage.
  const bool empty_sum = a.shape()[a.dim() - 1] == 0;
  Tensor out = empty_sum ? zeros(shape, a.options()) : empty(shape, a.options());
  if (out.numel() > 0 && !empty_sum) kernels::batched_gemm(a, b, out);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  record(amp::Op::Matmul, out, {a, b},
         [sa = SavedTensor(need_b ? a : Tensor()), sb = SavedTensor(need_a ? b : Tensor()),
          shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) -> std::vector<Tensor> {
           Tensor ga, gb;
           if (sb.defined()) ga = sum_to(matmul(g, sb.get().transpose(-1, -2)), shape_a);
           if (sa.defined()) gb = sum_to(matmul(sa.get().transpose(-1, -2), g), shape_b);
           return {ga, gb};
         });
  return out;
}
}  // namespace

// ---- linear (+ its ReLU or GELU epilogue) ---------------------------------------------------------

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, LinearOptions options) {
  const std::string_view name = amp::op_name(amp::Op::Linear);  // the report row, even with an epilogue
  const bool relu = options.epilogue == Epilogue::Relu, gelu = options.epilogue == Epilogue::Gelu;
  HG_CHECK(options.epilogue != Epilogue::Relu6, name,
           ": the Relu6 epilogue is batch_norm's only (write relu6(linear(...)))");
  if (amp::fp8_enabled()) {  // (ops/fp8_ops.h; its GEMM has no GELU epilogue: gelu() after it)
    const Tensor out = amp::detail::fp8_linear(x_in, w_in, b_in, relu);
    return gelu ? hg::gelu(out) : out;
  }
  auto [x0, w0, b0] = amp::prepare(amp::Op::Linear, x_in, w_in, b_in);
  detail::check_same_device(name, x0, w0);
  HG_CHECK(w0.dim() == 2, name, ": weight must be 2-D (out_features, in_features), got ", w0.shape());
  HG_CHECK(x0.dim() >= 1 && x0.shape()[x0.dim() - 1] == w0.shape()[1], name, ": mat1 and mat2 shapes cannot be "
           "multiplied (input ", x0.shape(), " and weight ", w0.shape(), "^T): in_features is ", w0.shape()[1]);
  const int64_t in = w0.shape()[1], out_features = w0.shape()[0];
  if (b0.defined()) {
    detail::check_same_device(name, x0, b0);
    HG_CHECK(b0.dim() == 1 && b0.shape()[0] == out_features, name, ": bias must have shape [", out_features,
             "], got ", b0.shape());
  }
  DType dtype = promote_types(x0.dtype(), w0.dtype());
  if (b0.defined()) dtype = promote_types(dtype, b0.dtype());
  HG_CHECK(is_floating(dtype), name, ": expected floating tensors, got ", x0.dtype(), " and ", w0.dtype());
  const Tensor x = x0.to(dtype), w = w0.to(dtype), b = b0.defined() ? b0.to(dtype) : Tensor();

  int64_t rows = 1;  // the product of the leading dims (not numel / in: in may be 0)
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  const Tensor x2 = gemm_operand(x.reshape({rows, in}));
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  // A fresh output, never a view of the bias; the epilogues are relu's and gelu's own formulas
  // on both devices, so NaN stays NaN everywhere. GELU's derivative reads the value before it
  // (kept only when a gradient will flow).
  Tensor pre_gelu;
  Tensor out = kernels::linear(x2, w, b, relu, gelu, gelu && autograd::needs_grad({x, w, b}) ? &pre_gelu : nullptr)
                   .view(out_shape);
  record(amp::Op::Linear, out, {x, w, b},
         [sx = SavedTensor(w.requires_grad() ? x2 : Tensor()),
          sw = SavedTensor(x.requires_grad() ? w : Tensor()), sy = SavedTensor(relu ? out : Tensor()),
          s_pre = SavedTensor(pre_gelu), x_shape = x.shape(), rows, out_features,
          need_bias = b.defined() && b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
           Tensor g2 = g.reshape({rows, out_features});
           if (sy.defined())  // relu's derivative: the gradient passes where the output is positive
             g2 = kernels::map_to_new<2>(g2.shape(), {sy.get().reshape({rows, out_features}), g2},
                                        kernels::math::BackwardFromInput<kernels::math::Relu>{});
           if (s_pre.defined()) {  // gelu's derivative, with gelu()'s own kernels
             const Tensor pre = s_pre.get();
             g2 = kernels::activation_vectorised(pre)
                      ? kernels::gelu_backward_cpu(pre, detail::dense(g2))
                      : kernels::map_to_new<2>(g2.shape(), {pre, g2}, kernels::math::BackwardFromInput<kernels::math::Gelu>{});
           }
           Tensor gx;
           if (sw.defined()) gx = matmul(g2, sw.get()).reshape(x_shape);
           if (!sx.defined()) return {gx, Tensor(), need_bias ? sum(g2, {0}) : Tensor()};
           auto [gw, gb] = kernels::linear_weight_grads(g2, sx.get(), need_bias);
           return {gx, gw, gb};
         });
  return out;
}

}  // namespace hg
