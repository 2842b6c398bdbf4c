// The FP8 recipes (amp/fp8.h): the state and its guard, and the quantiser (on the CPU here; one
// tile of a CUDA tensor on the device, kernels/cuda/fp8.h). The FP8 versions of linear, matmul and
// conv2d that use them are ops: ops/fp8_ops.cpp.
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

namespace hg::amp {

namespace {

thread_local Fp8State* t_state = nullptr;
thread_local int t_backward_depth = 0;  // the backward depth the region was opened at
thread_local int t_inside_fp8_op = 0;   // the ops an FP8 op is made of run unquantised
thread_local int t_suspended = 0;       // inside a SuspendFp8: no region is on

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
    update(slot->input, detail::forward_format(recipe_));
    update(slot->weight, detail::forward_format(recipe_));
    update(slot->grad, detail::gradient_format(recipe_));
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
  enabled = enabled && t_suspended == 0;
  if (enabled) state.begin_region();
  t_state = enabled ? &state : nullptr;
  t_backward_depth = autograd::backward_depth();
}

Fp8Autocast::~Fp8Autocast() { t_state = previous_; }

namespace detail {

InsideFp8Op::InsideFp8Op() { ++t_inside_fp8_op; }
InsideFp8Op::~InsideFp8Op() { --t_inside_fp8_op; }
SuspendFp8::SuspendFp8() { ++t_suspended; }
SuspendFp8::~SuspendFp8() { --t_suspended; }

Fp8State& current_fp8_state() {
  HG_CHECK(t_state != nullptr, "internal error: an FP8 op outside an Fp8Autocast region");
  return *t_state;
}

// A non-finite amax (an overflowed step) is not recorded: it would pin the scale at 1.
void record_amax(Fp8TensorScaling& scaling, float amax, int64_t length) {
  if (!std::isfinite(amax)) return;
  scaling.amax_history.push_back(amax);
  if (int64_t(scaling.amax_history.size()) > length)
    scaling.amax_history.erase(scaling.amax_history.begin(), scaling.amax_history.end() - length);
}

// What an operand's scaling keeps of one quantisation: delayed scaling records the amax in its
// history; current scaling keeps the scale it used (for reports); block scaling keeps nothing
// (one scale per tile).
void remember(Fp8TensorScaling& scaling, const Fp8Recipe& recipe, bool block, float amax, float scale) {
  if (recipe.scaling == Fp8Scaling::Delayed) record_amax(scaling, amax, recipe.amax_history_len);
  else if (!block) scaling.scale = scale;
}


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


}  // namespace detail

bool fp8_enabled() {
  return t_state != nullptr && t_inside_fp8_op == 0 && t_suspended == 0 &&
         autograd::backward_depth() == t_backward_depth;
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

}  // namespace hg::amp
