// The FP8 versions of linear, matmul and conv2d (amp/fp8.h's recipes), composed from the
// ordinary ops around two small graph nodes:
//
//   x --quantise--> x^ --+
//                        +-- linear / matmul / conv2d (f32) --quantise gradient--> (+ bias) --> y
//   w --quantise--> w^ --+
//
// The quantise nodes pass the gradient straight through (x^ is x to FP8 precision); the
// gradient node is the identity forward and quantises the incoming gradient backward, so the
// op's own backward sees FP8 gradients, as an FP8 backward GEMM does. On a GPU with FP8 tensor
// cores, per-tensor recipes run on cuBLASLt's FP8 GEMM instead (below). linear, matmul and conv2d
// call these when amp::fp8_enabled(); the state, the guard and the quantiser are amp/fp8.cpp's.
#include "ops/fp8_ops.h"

#include <cmath>
#include <limits>
#include <utility>

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "amp/precision_report.h"
#include "autograd/node.h"
#include "core/copy.h"
#include "kernels/cuda/fp8.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/shape.h"

namespace hg::amp {

namespace {

using detail::forward_format;
using detail::gradient_format;
using detail::quantise_gradient;
using detail::quantise_operand;
using detail::remember;

// The product's dtype: bf16 holds every FP8 value times a power of two exactly (f16's range does
// not): under a bf16 autocast the product runs in bf16 -- the same products, summed in f32,
// rounded to bf16 at the end, as Transformer Engine's bf16 output -- where native bf16 dot
// products make it faster.
DType product_dtype() { return is_enabled() && autocast_dtype() == bf16 ? bf16 : f32; }

// What every FP8 op does around its f32 product: its operands quantised by its slot's scaling,
// autocast off inside, and the gradient quantiser on the product.
template <class Product>
Tensor run_fp8_op(const Tensor& x, const Tensor& w, const std::shared_ptr<Fp8Slot>& slot, bool block_allowed,
                  const Product& product) {
  const Fp8Recipe& recipe = detail::current_fp8_state().recipe();
  const DType compute = product_dtype();
  const detail::InsideFp8Op inside;
  const Autocast autocast_off(autocast_dtype(), false);
  const Tensor xq = quantise_operand(x, slot->input, recipe, false, block_allowed).to(compute);
  const Tensor wq = quantise_operand(w, slot->weight, recipe, true, block_allowed).to(compute);
  return quantise_gradient(product(xq, wq), slot, recipe, block_allowed);
}

// ---- on FP8 tensor cores (CUDA, sm_89+) ----------------------------------------------------------
//
// The same recipe with real FP8 tensors: each operand quantised on the device to one byte an
// element, multiplied by cuBLASLt's FP8 GEMM (kernels/cuda/fp8.h), which applies the inverse
// scales to the f32 accumulator. Per-tensor scales are powers of two, so this computes what the
// emulation above computes, up to the order of the f32 sums. One graph node: its backward
// quantises the incoming gradient and runs the two gradient GEMMs in FP8 too (E5M2 x E4M3 under
// HYBRID), on transposed copies of the saved codes (Hopper's FP8 GEMM takes K innermost only).

// Whether y = x w^T, x (M, K), w (N, K), runs on the FP8 GEMM: a CUDA device with FP8 tensor cores,
// per-tensor scaling (block scales need Blackwell's block-scaled GEMMs: emulated), and M, N, K
// multiples of 16 (cuBLASLt's FP8 rule; every one of the three is the inner dimension of one of
// the forward and backward GEMMs). Otherwise the emulation runs, on any device.
bool fp8_gemm_applies(const Tensor& x, const Tensor& w, int64_t m, int64_t n, int64_t k) {
  return x.device().is_cuda() && w.device() == x.device() && detail::current_fp8_state().recipe().scaling != Fp8Scaling::Block &&
         m > 0 && n > 0 && k > 0 && m % 16 == 0 && n % 16 == 0 && k % 16 == 0 &&
         kernels::cuda::fp8_gemm_supported(x.device());
}

// Quantises t on the device by the recipe and keeps its amax or scale in `scaling`.
// NOTE: reading the amax back is one wait for the GPU per quantised tensor: the amax histories
// live on the host (they are the checkpointed state). Transformer Engine keeps them on the device.
kernels::cuda::Fp8DeviceTensor quantise_on_device(const Tensor& t, Fp8TensorScaling& scaling, const Fp8Recipe& recipe,
                                                  DType format) {
  const bool delayed = recipe.scaling == Fp8Scaling::Delayed;
  kernels::cuda::Fp8DeviceTensor q =
      kernels::cuda::fp8_quantise(t, format, recipe.margin, delayed ? &scaling.scale : nullptr, false);
  const float amax = q.amax.item<float>();
  remember(scaling, recipe, false, amax, delayed ? scaling.scale : fp8_scale_for(amax, format, recipe.margin));
  return q;
}

// out (M, N) = a (M, K) b (N, K)^T in `dtype`, from FP8 codes and their inverse scales.
Tensor fp8_product(const kernels::cuda::Fp8DeviceTensor& a, const kernels::cuda::Fp8DeviceTensor& b, DType dtype) {
  Tensor out = empty({a.codes.shape()[0], b.codes.shape()[0]}, {.dtype = dtype, .device = a.codes.device()});
  kernels::cuda::fp8_gemm(a.codes, a.scale_inv, b.codes, b.scale_inv, out, {});
  return out;
}

// The same FP8 tensor transposed, as a contiguous copy (a byte copy on the device).
kernels::cuda::Fp8DeviceTensor transposed(kernels::cuda::Fp8DeviceTensor q) {
  q.codes = ::hg::detail::dense_copy(::hg::detail::transposed_view(q.codes));
  return q;
}

// The same FP8 tensor seen as a (rows, cols) matrix (its codes are contiguous).
kernels::cuda::Fp8DeviceTensor as_matrix(kernels::cuda::Fp8DeviceTensor q, int64_t rows, int64_t cols) {
  q.codes = ::hg::detail::dense_view(q.codes, {rows, cols});
  return q;
}

// y (..., N) = x (..., K) w^T for w (N, K) (linear's layout), or x w for w (K, N) when `w_is_kn`
// (matmul's), as one graph node; x's leading dims are the GEMM's M. Every view here is core's
// (no graph op): the node's gradients come back in x's and w's own shapes.
Tensor run_fp8_gemm(const Tensor& x, const Tensor& w, const std::shared_ptr<Fp8Slot>& slot, bool w_is_kn) {
  const Fp8Recipe recipe = detail::current_fp8_state().recipe();
  const DType compute = product_dtype();
  const int64_t k = x.shape().back(), m = x.numel() / k, n = w.shape()[w_is_kn ? 1 : 0];
  using kernels::cuda::Fp8DeviceTensor;
  const Fp8DeviceTensor xq = as_matrix(quantise_on_device(x, slot->input, recipe, forward_format(recipe)), m, k);
  const Fp8DeviceTensor wq = quantise_on_device(w, slot->weight, recipe, forward_format(recipe));
  Shape y_shape = x.shape();
  y_shape.back() = n;
  Tensor y = ::hg::detail::dense_view(fp8_product(xq, w_is_kn ? transposed(wq) : wq, compute), y_shape);
  autograd::record(
      "fp8_gemm", y, {x, w},
      [slot, recipe, xq, wq, compute, w_is_kn, m, n, x_shape = x.shape(), x_dtype = x.dtype(), w_dtype = w.dtype(),
       need_x = x.requires_grad(), need_w = w.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
        const Fp8DeviceTensor gq = as_matrix(quantise_on_device(g, slot->grad, recipe, gradient_format(recipe)), m, n);
        Tensor grad_x, grad_w;
        // fp8_product(a, b) = a b^T. grad_x = g w (linear) or g w^T (matmul); grad_w = g^T x or x^T g.
        if (need_x)
          grad_x = ::hg::detail::dense_view(fp8_product(gq, w_is_kn ? wq : transposed(wq), compute), x_shape).to(x_dtype);
        if (need_w)
          grad_w = (w_is_kn ? fp8_product(transposed(xq), transposed(gq), compute)
                            : fp8_product(transposed(gq), transposed(xq), compute)).to(w_dtype);
        return {grad_x, grad_w};
      });
  return y;
}

Tensor add_bias_and_relu(Tensor y, const Tensor& b, const Shape& bias_shape, bool relu) {
  const detail::InsideFp8Op inside;
  if (b.defined()) y = y + b.reshape(bias_shape);
  return relu ? hg::relu(y) : y;
}

}  // namespace

// ---- the ops -------------------------------------------------------------------------------

namespace {

thread_local detail::Fp8OpObserver* t_observer = nullptr;  // (ops/fp8_ops.h)

// Every FP8 op is one op to the tools: an active PrecisionReport gets one row for it -- "FP8
// delayed (E4M3, E5M2 gradients)", computing in f8e4m3 -- and a ShadowCheck (the observer) its
// unquantised inputs, result and scales, instead of a row for each op it is made of. `run` gets
// the op's slot (the call site's scaling).
template <class Run>
Tensor as_one_op(std::string_view op, std::span<const Tensor> inputs, bool block_allowed, const Run& run) {
  PrecisionReport* report = detail::current_report();
  detail::Fp8OpObserver* observer = t_observer;
  const std::shared_ptr<Fp8Slot> slot = detail::current_fp8_state().next_slot();
  Tensor y;
  {
    const detail::PauseReports pause;
    const detail::Observing unobserved(nullptr, nullptr, nullptr);
    y = run(slot);
  }
  const Fp8Recipe& recipe = detail::current_fp8_state().recipe();
  if (observer != nullptr) {
    const bool per_tile = recipe.scaling == Fp8Scaling::Block && block_allowed;
    const float tiles = std::numeric_limits<float>::quiet_NaN();
    observer->fp8_op(op, inputs, y, per_tile ? tiles : slot->input.scale, per_tile ? tiles : slot->weight.scale);
  }
  if (report != nullptr) {
    const char* scaling = recipe.scaling == Fp8Scaling::Delayed   ? "delayed"
                          : recipe.scaling == Fp8Scaling::Current ? "current"
                                                                  : "block";
    PrecisionReport::Row row;
    row.op = std::string(op);
    row.policy = std::string("FP8 ") + scaling + " (E4M3, " +
                 (detail::gradient_format(recipe) == f8e5m2 ? "E5M2" : "E4M3") + " gradients)";
    row.inputs = {inputs[0].dtype(), inputs[1].dtype()};
    row.compute = f8e4m3;
    row.output = y.dtype();
    row.calls = 1;
    report->record(std::move(row));
  }
  return y;
}

}  // namespace

namespace detail {

Fp8OpObserver* set_fp8_op_observer(Fp8OpObserver* observer) { return std::exchange(t_observer, observer); }

Observing::Observing(PrepareObserver* prepare, autograd::OutputObserver* output, Fp8OpObserver* fp8)
    : previous_prepare_(set_prepare_observer(prepare)), previous_output_(autograd::set_output_observer(output)),
      previous_fp8_(set_fp8_op_observer(fp8)) {}

Observing::~Observing() {
  set_prepare_observer(previous_prepare_);
  autograd::set_output_observer(previous_output_);
  set_fp8_op_observer(previous_fp8_);
}

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  const Tensor inputs[] = {x, w, b};
  return as_one_op("linear", inputs, true, [&](const std::shared_ptr<Fp8Slot>& slot) {
    const int64_t k = w.dim() == 2 ? w.shape()[1] : 0, n = w.dim() == 2 ? w.shape()[0] : 0;
    const int64_t m = x.dim() >= 2 && k > 0 && x.shape().back() == k ? x.numel() / k : 0;
    const Tensor y = fp8_gemm_applies(x, w, m, n, k)
                         ? run_fp8_gemm(x, w, slot, /*w_is_kn=*/false)
                         : run_fp8_op(x, w, slot, true,
                                      [](const Tensor& xq, const Tensor& wq) { return linear(xq, wq); });
    return add_bias_and_relu(y, b, Shape{b.defined() ? b.numel() : 0}, relu);
  });
}

Tensor fp8_matmul(const Tensor& a, const Tensor& b) {
  const Tensor inputs[] = {a, b};
  return as_one_op("matmul", inputs, true, [&](const std::shared_ptr<Fp8Slot>& slot) {
    if (a.dim() == 2 && b.dim() == 2 && a.shape()[1] == b.shape()[0] &&
        fp8_gemm_applies(a, b, a.shape()[0], b.shape()[1], a.shape()[1]))
      return run_fp8_gemm(a, b, slot, /*w_is_kn=*/true);
    return run_fp8_op(a, b, slot, true, [](const Tensor& aq, const Tensor& bq) { return matmul(aq, bq); });
  });
}

Tensor fp8_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                  int64_t dilation, int64_t groups, bool relu) {
  const Tensor inputs[] = {x, w, b};
  // Block scaling needs the GEMM's operands, which the convolution never materialises: per tensor.
  return as_one_op("conv2d", inputs, false, [&](const std::shared_ptr<Fp8Slot>& slot) {
    const Tensor y = run_fp8_op(x, w, slot, false, [&](const Tensor& xq, const Tensor& wq) {
      return conv2d(xq, wq, {}, {.stride = stride, .padding = padding, .dilation = dilation, .groups = groups});
    });
    return add_bias_and_relu(y, b, Shape{1, b.defined() ? b.numel() : 0, 1, 1}, relu);
  });
}

}  // namespace detail

}  // namespace hg::amp
