// The thread-local autocast state, the cast rules and the weight-cast cache.
#include "amp/autocast.h"

#include <unordered_map>
#include <utility>

#include "amp/op_table.h"
#include "amp/precision_report.h"
#include "autograd/grad_mode.h"

namespace hg::amp {

namespace {

struct CachedCast {
  std::weak_ptr<TensorImpl> source;  // to notice a freed source whose address was reused
  uint64_t source_version;           // to notice in-place updates (e.g. an optimizer step)
  Tensor cast;
};

struct AutocastState {
  bool enabled = false;
  DType dtype = f16;
  int depth = 0;  // nesting of Autocast guards; the cache lives while depth > 0
  int backward_depth = 0;  // autograd::backward_depth() when the innermost region was opened
  std::unordered_map<const TensorImpl*, CachedCast> cache;
};

thread_local AutocastState t_state;
thread_local detail::PrepareObserver* t_prepare_observer = nullptr;

// PyTorch's rule: only f32 leaves that require grad are worth caching (weights), and only while
// recording: a cast made under NoGradGuard has no graph and must not be reused with one.
bool cacheable(const Tensor& t, DType target) {
  return is_16bit_floating(target) && t.dtype() == f32 && t.requires_grad() && t.is_leaf() &&
         GradMode::is_enabled();
}

struct CastCount {
  int64_t casts = 0, bytes = 0, hits = 0;
};

Tensor cast(const Tensor& t, DType target, CastCount& count) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == f64 || t.dtype() == target) return t;
  const bool use_cache = cacheable(t, target);
  const uint64_t version = t.impl()->storage->version();
  if (use_cache) {
    auto it = t_state.cache.find(t.impl());
    if (it != t_state.cache.end() && !it->second.source.expired() && it->second.source_version == version &&
        it->second.cast.dtype() == target) {
      ++count.hits;
      return it->second.cast;
    }
  }
  Tensor converted = t.to(target);
  ++count.casts;
  count.bytes += converted.numel() * int64_t(element_size(target));
  if (use_cache) t_state.cache[t.impl()] = CachedCast{t.impl_ptr(), version, converted};
  return converted;
}

DType widest_floating(std::span<Tensor> inputs) {
  std::optional<DType> widest;
  for (const Tensor& t : inputs)
    if (t.defined() && is_floating(t.dtype())) widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
  return widest.value_or(f32);
}

}  // namespace

bool is_enabled() { return t_state.enabled && t_state.backward_depth == autograd::backward_depth(); }
DType autocast_dtype() { return t_state.dtype; }

Autocast::Autocast(DType dtype, bool enabled)
    : previous_enabled_(t_state.enabled),
      previous_dtype_(t_state.dtype),
      previous_backward_depth_(t_state.backward_depth) {
  HG_CHECK(!enabled || is_16bit_floating(dtype), "Autocast: the autocast dtype must be f16 or bf16, got ", dtype);
  t_state.enabled = enabled;
  t_state.dtype = dtype;
  t_state.backward_depth = autograd::backward_depth();
  ++t_state.depth;
}

Autocast::~Autocast() {
  if (--t_state.depth == 0) t_state.cache.clear();
  t_state.enabled = previous_enabled_;
  t_state.dtype = previous_dtype_;
  t_state.backward_depth = previous_backward_depth_;
}

namespace detail {

bool active() { return is_enabled() || current_report() != nullptr || t_prepare_observer != nullptr; }

PrepareObserver* set_prepare_observer(PrepareObserver* observer) { return std::exchange(t_prepare_observer, observer); }

size_t cache_size() { return t_state.cache.size(); }

namespace {
std::vector<DType> floating_dtypes(std::span<Tensor> inputs) {
  std::vector<DType> out;
  for (const Tensor& t : inputs)
    if (t.defined() && is_floating(t.dtype())) out.push_back(t.dtype());
  return out;
}

// What prepare does for one op, built-in or custom: `policy` is empty for a custom op nobody gave
// one; `output` says how the output dtype follows from the compute dtype (for the report).
void prepare_with(std::string_view op, std::optional<CastPolicy> policy, OutputDType output,
                  std::span<Tensor> inputs) {
  if (t_prepare_observer != nullptr) t_prepare_observer->arrived(op, inputs);
  PrecisionReport* report = current_report();
  const std::vector<DType> arrived = report ? floating_dtypes(inputs) : std::vector<DType>{};
  CastCount count;
  std::string fired = autograd::backward_depth() > 0 ? "backward" : "off";
  if (is_enabled()) {
    HG_CHECK(policy.has_value(), "autocast: op '", op, "' has no cast policy, and halfgrad does not guess one. "
             "Choose with hg::amp::set_policy(\"", op, "\", p) where p is CastPolicy::Lower (run in ",
             t_state.dtype, "), F32 (run in f32), Promote (widest input dtype) or Keep (inputs as they are)");
    fired = std::string(policy_name(*policy));
    // Autocast is off while casting, so the casts themselves are never re-cast.
    switch (*policy) {
      case CastPolicy::Lower:
        for (Tensor& t : inputs) t = cast(t, t_state.dtype, count);
        break;
      case CastPolicy::F32:
        for (Tensor& t : inputs) t = cast(t, f32, count);
        break;
      case CastPolicy::Promote: {
        const DType widest = widest_floating(inputs);
        for (Tensor& t : inputs) t = cast(t, widest, count);
        break;
      }
      case CastPolicy::Keep:
        break;
    }
  }
  if (report) {
    const std::vector<DType> ran = floating_dtypes(inputs);
    DType compute = ran.empty() ? f32 : ran.front();
    for (DType d : ran) compute = promote_types(compute, d);
    const DType first = ran.empty() ? compute : ran.front();
    report->record({std::string(op), fired, arrived, compute, output_dtype(output, compute, first), 1, count.casts,
                    count.bytes, count.hits, false, {}});
  }
  if (t_prepare_observer != nullptr) t_prepare_observer->prepared(op, inputs);
}
}  // namespace

void prepare_inputs(Op op, std::span<Tensor> inputs) {
  prepare_with(op_name(op), policy(op), op_info(op).output, inputs);
}

void prepare_inputs(std::string_view op, std::span<Tensor> inputs) {
  prepare_with(op, find_policy(op), OutputDType::Computed, inputs);
}

void prepare_inputs(std::string_view op, std::span<Tensor> inputs, CastPolicy policy) {
  prepare_with(op, policy, OutputDType::Computed, inputs);
}

void cast_inputs(std::string_view op, std::span<Tensor> inputs, DType dtype) {
  PrecisionReport* report = current_report();
  const std::vector<DType> arrived = report ? floating_dtypes(inputs) : std::vector<DType>{};
  CastCount count;
  for (Tensor& t : inputs) t = cast(t, dtype, count);
  if (report) report->record({std::string(op), "cast_inputs", arrived, dtype, dtype, 1, count.casts, count.bytes, count.hits, false, {}});
}

}  // namespace detail

}  // namespace hg::amp
