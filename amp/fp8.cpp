// The FP8 recipes (amp/fp8.h): the state and its guard, the quantiser, and the FP8 versions of
// linear, matmul and conv2d, composed from the ordinary ops around two small graph nodes:
//
//   x --quantise--> x^ --+
//                        +-- linear / matmul / conv2d (f32) --quantise gradient--> (+ bias) --> y
//   w --quantise--> w^ --+
//
// The quantise nodes pass the gradient straight through (x^ is x to FP8 precision); the
// gradient node is the identity forward and quantises the incoming gradient backward, so the
// op's own backward sees FP8 gradients, as an FP8 backward GEMM does. That emulation is the
// reference. On a GPU with FP8 tensor cores, linear and 2-D matmul under per-tensor scaling run
// the same recipe on real FP8 tensors and cuBLASLt's FP8 GEMM instead (run_fp8_gemm).
#include "amp/fp8.h"

#include <bit>
#include <cmath>
#include <string>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/float8.h"
#include "core/copy.h"
#include "core/parallel.h"
#include "kernels/cuda/fp8.h"
#include "kernels/math/fp8_scale.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/activation.h"
#include "ops/linalg.h"

namespace hg::amp {

namespace {

thread_local Fp8State* t_state = nullptr;
thread_local int t_backward_depth = 0;  // the backward depth the region was opened at
thread_local int t_inside_fp8_op = 0;   // the ops an FP8 op is made of run unquantised

struct InsideFp8Op {
  InsideFp8Op() { ++t_inside_fp8_op; }
  ~InsideFp8Op() { --t_inside_fp8_op; }
};

const hg::detail::Float8Format& format_of(DType format) {
  HG_CHECK(is_float8(format), "FP8: expected f8e4m3 or f8e5m2 as the format, got ", format);
  return format == f8e4m3 ? hg::detail::kE4M3 : hg::detail::kE5M2;
}

float largest_of(DType format) { return format == f8e4m3 ? kFloat8E4M3Max : kFloat8E5M2Max; }

// The FP8 value nearest v (ties to even), saturating at +-largest, as a float: what
// float(float8(v, Saturate)) gives, without going through the code (this is the hot loop).
// Above the format's smallest normal, rounding is the f32 mantissa cut to M bits; below it the
// spacing is fixed (the subnormals), and adding and subtracting a power of two rounds to it.
struct NearestFp8 {
  explicit NearestFp8(DType format)
      : dropped(23 - uint32_t(format_of(format).mantissa_bits)),
        smallest_normal(std::ldexp(1.0f, 1 - format_of(format).bias)),
        // C = 2^23 * spacing: (magnitude + C) - C rounds magnitude to a multiple of the spacing
        // 2^(1 - bias - M), ties to even, in f32's own rounding.
        subnormal_shift(std::ldexp(1.0f, 23 + 1 - format_of(format).bias - format_of(format).mantissa_bits)),
        largest(largest_of(format)) {}

  float operator()(float v) const {
    if (std::isnan(v)) return v;
    const float magnitude = std::fabs(v);
    float rounded;
    if (magnitude >= smallest_normal) {
      if (magnitude > largest * 2) return std::copysign(largest, v);  // (also catches inf)
      uint32_t bits = std::bit_cast<uint32_t>(magnitude);
      bits += (1u << (dropped - 1)) - 1 + ((bits >> dropped) & 1u);  // round to nearest even
      bits &= ~((1u << dropped) - 1);
      rounded = std::bit_cast<float>(bits);
    } else {
      const volatile float shifted = magnitude + subnormal_shift;  // (volatile: keep the two roundings apart)
      rounded = shifted - subnormal_shift;
    }
    return std::copysign(std::fmin(rounded, largest), v);
  }

  uint32_t dropped;
  float smallest_normal, subnormal_shift, largest;
};

// Appends this step's amax to a delayed-scaling history and keeps the newest `length`. A
// non-finite amax (an overflowed step) is not recorded: it would pin the scale at 1.
void record_amax(Fp8TensorScaling& scaling, float amax, int64_t length) {
  if (!std::isfinite(amax)) return;
  scaling.amax_history.push_back(amax);
  if (int64_t(scaling.amax_history.size()) > length)
    scaling.amax_history.erase(scaling.amax_history.begin(),
                               scaling.amax_history.end() - length);
}

// What an operand's scaling keeps of one quantisation: delayed scaling records the amax in its
// history; current scaling keeps the scale it used (for reports); block scaling keeps nothing
// (one scale per tile).
void remember(Fp8TensorScaling& scaling, const Fp8Recipe& recipe, bool block, float amax, float scale) {
  if (recipe.scaling == Fp8Scaling::Delayed) record_amax(scaling, amax, recipe.amax_history_len);
  else if (!block) scaling.scale = scale;
}

DType forward_format(const Fp8Recipe&) { return f8e4m3; }
DType gradient_format(const Fp8Recipe& recipe) { return recipe.formats == Fp8Formats::Hybrid ? f8e5m2 : f8e4m3; }

// Quantises one operand by the recipe and returns it as a graph node whose gradient passes
// straight through to t.
Tensor quantise_operand(const Tensor& t, Fp8TensorScaling& scaling, const Fp8Recipe& recipe, bool is_weight,
                        bool block_allowed) {
  const bool block = recipe.scaling == Fp8Scaling::Block && block_allowed;
  const bool delayed = recipe.scaling == Fp8Scaling::Delayed;
  const int64_t rows = block ? (is_weight ? recipe.block : 1) : 0, cols = block ? recipe.block : 0;
  Fp8Quantised q = fp8_quantise(t, forward_format(recipe), rows, cols, recipe.margin, delayed ? &scaling.scale : nullptr);
  remember(scaling, recipe, block, q.amaxes[0], q.scales[0]);
  Tensor values = q.values;
  autograd::record("fp8_quantise", values, {t}, [dtype = t.dtype()](const Tensor& g) -> std::vector<Tensor> {
    return {g.to(dtype)};
  });
  return values;
}

// The identity forward; backward quantises the incoming gradient by the recipe.
Tensor quantise_gradient(const Tensor& y, const std::shared_ptr<Fp8Slot>& slot, const Fp8Recipe& recipe,
                         bool block_allowed) {
  Tensor out = ::hg::detail::alias(y, y.shape(), y.strides(), y.storage_offset());
  autograd::record("fp8_quantise_gradient", out, {y},
                   [slot, recipe, block_allowed](const Tensor& g) -> std::vector<Tensor> {
                     const bool block = recipe.scaling == Fp8Scaling::Block && block_allowed;
                     const bool delayed = recipe.scaling == Fp8Scaling::Delayed;
                     Fp8Quantised q = fp8_quantise(g, gradient_format(recipe), block ? 1 : 0, block ? recipe.block : 0,
                                                   recipe.margin, delayed ? &slot->grad.scale : nullptr);
                     remember(slot->grad, recipe, block, q.amaxes[0], q.scales[0]);
                     return {q.values.to(g.dtype())};
                   });
  return out;
}

// The product's dtype: bf16 holds every FP8 value times a power of two exactly (f16's range does
// not): under a bf16 autocast the product runs in bf16 -- the same products, summed in f32,
// rounded to bf16 at the end, as Transformer Engine's bf16 output -- where native bf16 dot
// products make it faster.
DType product_dtype() { return is_enabled() && autocast_dtype() == bf16 ? bf16 : f32; }

// What every FP8 op does around its f32 product: a slot, autocast off inside, and the gradient
// quantiser on the product.
template <class Product>
Tensor run_fp8_op(const Tensor& x, const Tensor& w, bool block_allowed, const Product& product) {
  Fp8State& state = *t_state;
  const Fp8Recipe& recipe = state.recipe();
  const std::shared_ptr<Fp8Slot> slot = state.next_slot();
  const DType compute = product_dtype();
  const InsideFp8Op inside;
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
  return x.device().is_cuda() && w.device() == x.device() && t_state->recipe().scaling != Fp8Scaling::Block &&
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
Tensor run_fp8_gemm(const Tensor& x, const Tensor& w, bool w_is_kn) {
  Fp8State& state = *t_state;
  const Fp8Recipe recipe = state.recipe();
  const std::shared_ptr<Fp8Slot> slot = state.next_slot();
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
  const InsideFp8Op inside;
  if (b.defined()) y = y + b.reshape(bias_shape);
  return relu ? hg::relu(y) : y;
}

}  // namespace

// ---- the state and the guard -------------------------------------------------------------------

Fp8State::Fp8State(Fp8Recipe recipe) : recipe_(std::move(recipe)) {
  HG_CHECK(recipe_.amax_history_len >= 1, "Fp8Recipe: amax_history_len must be at least 1, got ",
           recipe_.amax_history_len);
  HG_CHECK(recipe_.amax_compute_algo == "max" || recipe_.amax_compute_algo == "most_recent",
           "Fp8Recipe: amax_compute_algo must be \"max\" or \"most_recent\", got \"", recipe_.amax_compute_algo, "\"");
  HG_CHECK(recipe_.block >= 1, "Fp8Recipe: block must be at least 1, got ", recipe_.block);
  HG_CHECK(recipe_.margin >= 0, "Fp8Recipe: margin must be >= 0, got ", recipe_.margin);
}

void Fp8State::begin_region() {
  next_ = 0;
  if (recipe_.scaling != Fp8Scaling::Delayed) return;
  const auto update = [&](Fp8TensorScaling& scaling, DType format) {
    const std::vector<float>& history = scaling.amax_history;
    if (history.empty()) return;
    float amax = history.back();
    if (recipe_.amax_compute_algo == "max")
      for (const float a : history) amax = std::max(amax, a);
    if (amax > 0) scaling.scale = fp8_scale_for(amax, format, recipe_.margin);  // else keep the last scale
  };
  for (const std::shared_ptr<Fp8Slot>& slot : slots_) {
    update(slot->input, forward_format(recipe_));
    update(slot->weight, forward_format(recipe_));
    update(slot->grad, gradient_format(recipe_));
  }
}

std::shared_ptr<Fp8Slot> Fp8State::next_slot() {
  if (next_ == slots_.size()) slots_.push_back(std::make_shared<Fp8Slot>());
  return slots_[next_++];
}

namespace {
const char* const kRoles[] = {"input", "weight", "grad"};
Fp8TensorScaling& role(Fp8Slot& slot, int r) { return r == 0 ? slot.input : r == 1 ? slot.weight : slot.grad; }
}  // namespace

std::map<std::string, Tensor> Fp8State::state_dict() const {
  std::map<std::string, Tensor> state;
  state["scaling"] = full({}, double(int(recipe_.scaling)), {.dtype = i64});
  for (size_t k = 0; k < slots_.size(); ++k)
    for (int r = 0; r < 3; ++r) {
      const Fp8TensorScaling& s = role(*slots_[k], r);
      const std::string prefix = "slot" + std::to_string(k) + "." + kRoles[r] + ".";
      state[prefix + "amax_history"] = from_vector(s.amax_history, {int64_t(s.amax_history.size())});
      state[prefix + "scale"] = full({}, double(s.scale));
    }
  return state;
}

void Fp8State::load_state_dict(const std::map<std::string, Tensor>& state) {
  const auto find = [&](const std::string& key) -> const Tensor& {
    const auto it = state.find(key);
    HG_CHECK(it != state.end(), "Fp8State::load_state_dict: missing \"", key, "\"");
    return it->second;
  };
  const int64_t scaling = find("scaling").item<int64_t>();
  HG_CHECK(scaling == int64_t(recipe_.scaling), "Fp8State::load_state_dict: the state was saved with scaling ",
           scaling, " but this recipe has ", int(recipe_.scaling), " (0 delayed, 1 current, 2 block)");
  const size_t count = (state.size() - 1) / 6;
  HG_CHECK(state.size() == 1 + 6 * count, "Fp8State::load_state_dict: ", state.size(),
           " entries: expected \"scaling\" and 6 per slot");
  std::vector<std::shared_ptr<Fp8Slot>> slots;
  for (size_t k = 0; k < count; ++k) {
    auto slot = std::make_shared<Fp8Slot>();
    for (int r = 0; r < 3; ++r) {
      const std::string prefix = "slot" + std::to_string(k) + "." + kRoles[r] + ".";
      role(*slot, r).amax_history = find(prefix + "amax_history").to_vector<float>();
      role(*slot, r).scale = find(prefix + "scale").item<float>();
    }
    slots.push_back(std::move(slot));
  }
  slots_ = std::move(slots);
  next_ = 0;
}

Fp8Autocast::Fp8Autocast(Fp8State& state, bool enabled) : previous_(t_state) {
  if (enabled) state.begin_region();
  t_state = enabled ? &state : nullptr;
  t_backward_depth = autograd::backward_depth();
}

Fp8Autocast::~Fp8Autocast() { t_state = previous_; }

bool fp8_enabled() {
  return t_state != nullptr && t_inside_fp8_op == 0 && autograd::backward_depth() == t_backward_depth;
}

// ---- the quantiser -----------------------------------------------------------------------------

float fp8_scale_for(float amax, DType format, int margin) {
  return kernels::math::fp8_scale_for(amax, largest_of(format), margin);  // (the CUDA quantiser's formula too)
}

Fp8Quantised fp8_quantise(const Tensor& t, DType format, int64_t tile_rows, int64_t tile_cols, int margin,
                          const float* fixed_scale) {
  HG_CHECK(is_floating(t.dtype()) && !is_float8(t.dtype()), "fp8_quantise: expected an f32, f64, f16 or bf16 tensor, got ",
           t.dtype());
  const NearestFp8 nearest(format);
  const int64_t cols = t.dim() == 0 ? 1 : t.shape()[t.dim() - 1];
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  const int64_t tr = tile_rows > 0 ? std::min(tile_rows, std::max<int64_t>(rows, 1)) : std::max<int64_t>(rows, 1);
  const int64_t tc = tile_cols > 0 ? std::min(tile_cols, std::max<int64_t>(cols, 1)) : std::max<int64_t>(cols, 1);
  const int64_t tiles_down = std::max<int64_t>((rows + tr - 1) / tr, 1), tiles_across = (cols + tc - 1) / tc;
  // One tile of a CUDA tensor: the device quantiser (kernels/cuda/fp8.cu), the same codes bit for
  // bit. Tiles of a CUDA tensor are quantised here on a host copy.
  if (t.device().is_cuda() && tiles_down * tiles_across <= 1) {
    const kernels::cuda::Fp8DeviceTensor d = kernels::cuda::fp8_quantise(t, format, margin, fixed_scale, true);
    const float amax = d.amax.item<float>();
    return {d.values, {amax}, {fixed_scale ? *fixed_scale : fp8_scale_for(amax, format, margin)}};
  }
  const Tensor source = ::hg::detail::to_cpu_contiguous(t, f32);
  const float* in = source.data_ptr<float>();
  // Pass 1, rows in parallel: each row's amax in each tile column; then the tiles' amaxes.
  std::vector<float> row_amax(size_t(rows * tiles_across), 0.0f);
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t ta = 0; ta < tiles_across; ++ta) {
        float amax = 0;
        for (int64_t c = ta * tc, c1 = std::min(cols, c + tc); c < c1; ++c) {
          const float a = std::fabs(in[r * cols + c]);
          if (!(a <= amax)) amax = a;  // (NaN wins: the tile then keeps scale 1)
        }
        row_amax[size_t(r * tiles_across + ta)] = amax;
      }
  });
  Fp8Quantised q;
  q.amaxes.assign(size_t(std::max<int64_t>(tiles_down * tiles_across, 1)), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ta = 0; ta < tiles_across; ++ta) {
      float& amax = q.amaxes[size_t((r / tr) * tiles_across + ta)];
      const float a = row_amax[size_t(r * tiles_across + ta)];
      if (!(a <= amax)) amax = a;
    }
  q.scales.resize(q.amaxes.size());
  for (size_t tile = 0; tile < q.amaxes.size(); ++tile)
    q.scales[tile] = fixed_scale ? *fixed_scale : fp8_scale_for(q.amaxes[tile], format, margin);
  // Pass 2, rows in parallel: every element to its tile's FP8 grid. x^ = Q(x s) / s is exact: s = 2^k.
  q.values = empty(t.shape());
  float* out = q.values.data_ptr<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t ta = 0; ta < tiles_across; ++ta) {
        const float scale = q.scales[size_t((r / tr) * tiles_across + ta)];
        for (int64_t c = ta * tc, c1 = std::min(cols, c + tc); c < c1; ++c)
          out[r * cols + c] = nearest(in[r * cols + c] * scale) / scale;
      }
  });
  if (t.device().is_cuda()) q.values = q.values.to(t.device());
  return q;
}

// ---- the FP8 ops -------------------------------------------------------------------------------

namespace detail {

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  const int64_t k = w.dim() == 2 ? w.shape()[1] : 0, n = w.dim() == 2 ? w.shape()[0] : 0;
  const int64_t m = x.dim() >= 2 && k > 0 && x.shape().back() == k ? x.numel() / k : 0;
  const Tensor y = fp8_gemm_applies(x, w, m, n, k)
                       ? run_fp8_gemm(x, w, /*w_is_kn=*/false)
                       : run_fp8_op(x, w, true, [](const Tensor& xq, const Tensor& wq) { return linear(xq, wq); });
  return add_bias_and_relu(y, b, Shape{b.defined() ? b.numel() : 0}, relu);
}

Tensor fp8_matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 2 && b.dim() == 2 && a.shape()[1] == b.shape()[0] &&
      fp8_gemm_applies(a, b, a.shape()[0], b.shape()[1], a.shape()[1]))
    return run_fp8_gemm(a, b, /*w_is_kn=*/true);
  return run_fp8_op(a, b, true, [](const Tensor& aq, const Tensor& bq) { return matmul(aq, bq); });
}

Tensor fp8_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                  int64_t dilation, int64_t groups, bool relu) {
  // Block scaling needs the GEMM's operands, which the convolution never materialises: per tensor.
  const Tensor y = run_fp8_op(x, w, false, [&](const Tensor& xq, const Tensor& wq) {
    return conv2d(xq, wq, {}, {.stride = stride, .padding = padding, .dilation = dilation, .groups = groups});
  });
  return add_bias_and_relu(y, b, Shape{1, b.defined() ? b.numel() : 0, 1, 1}, relu);
}

}  // namespace detail

}  // namespace hg::amp
