// Reducer (see reducer.h): bucket layout, the gradient hook, and the end-of-backward wait.
#include "distributed/reducer.h"

#include <map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/shape.h"

namespace hg::distributed {

namespace {

// NOTE: 16-bit gradients are summed in f32 (a bucket of them is an f32 buffer): the sum of many
// ranks' 16-bit values would lose their low bits, and MPI has no 16-bit arithmetic anyway.
DType reduce_dtype(DType dtype) { return compute_dtype(dtype); }

int64_t bytes_of(const Tensor& flat) { return flat.numel() * int64_t(element_size(flat.dtype())); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> parameters, std::shared_ptr<ProcessGroup> group,
                 int64_t bucket_cap_bytes)
    : group_(std::move(group)) {
  HG_CHECK(bucket_cap_bytes > 0, "DataParallel: bucket_cap_mb must be positive");
  for (auto& [name, param] : parameters) {
    if (!param.requires_grad()) continue;
    HG_CHECK(is_floating(param.dtype()), "DataParallel: parameter '", name, "' is ", param.dtype());
    Slot& slot = slots_.emplace_back();
    slot.param = param;
    slot.name = name;
  }
  build_buckets(bucket_cap_bytes);
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].hook = slots_[i].param.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); });
}

Reducer::~Reducer() {
  for (const Slot& slot : slots_) slot.param.remove_post_accumulate_grad_hook(slot.hook);
}

void Reducer::build_buckets(int64_t bucket_cap_bytes) {
  // One open bucket per (reduce dtype, device); a parameter that would overflow it closes it.
  std::map<std::pair<DType, std::string>, size_t> open;
  std::vector<int64_t> sizes;  // elements per bucket
  for (size_t k = slots_.size(); k-- > 0;) {
    Slot& slot = slots_[k];
    const DType dtype = reduce_dtype(slot.param.dtype());
    const auto key = std::make_pair(dtype, slot.param.device().str());
    const int64_t numel = slot.param.numel();
    auto it = open.find(key);
    if (it != open.end() && (sizes[it->second] + numel) * int64_t(element_size(dtype)) > bucket_cap_bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      it = open.emplace(key, buckets_.size()).first;
      buckets_.emplace_back().flat = empty({0}, {.dtype = dtype, .device = slot.param.device()});
      sizes.push_back(0);
    }
    slot.bucket = it->second;
    slot.offset = sizes[it->second];
    sizes[it->second] += numel;
    buckets_[slot.bucket].slots.push_back(k);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].flat = zeros({sizes[b]}, {.dtype = buckets_[b].flat.dtype(), .device = buckets_[b].flat.device()});
    buckets_[b].pending = buckets_[b].slots.size();
  }
}

std::vector<std::vector<std::string>> Reducer::bucket_names() const {
  std::vector<std::vector<std::string>> names(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k : buckets_[b].slots) names[b].push_back(slots_[k].name);
  return names;
}

Tensor Reducer::view_of(const Slot& slot) const {
  return narrow(buckets_[slot.bucket].flat, 0, slot.offset, slot.param.numel()).view(slot.param.shape());
}

void Reducer::prepare_for_backward() {
  if (syncing_) reset();  // the last backward threw before its end: start clean
}

// ---- during backward ------------------------------------------------------------------------------

void Reducer::on_gradient(size_t slot) {
  if (!enabled_) return;
  if (!syncing_) {
    syncing_ = true;
    autograd::queue_callback([this] { finish(); });
  }
  if (!slots_[slot].ready) mark_ready(slot, slots_[slot].param.grad());
  launch_ready_buckets();
  poll_launched();  // MPI moves a collective forward only inside MPI calls
}

void Reducer::mark_ready(size_t slot, const Tensor& grad) {
  NoGradGuard no_grad;
  Slot& s = slots_[slot];
  Tensor view = view_of(s);
  if (grad.defined()) view.copy_(grad);
  else view.zero_();
  s.ready = true;
  --buckets_[s.bucket].pending;
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.work = group_->all_reduce_async(bucket.flat, {.average = true});
    ++next_launch_;
  }
}

void Reducer::poll_launched() {
  for (size_t b = 0; b < next_launch_; ++b)
    if (buckets_[b].work) buckets_[b].work->is_completed();
}

// ---- at the end of backward -----------------------------------------------------------------------

void Reducer::finish() {
  const auto start = std::chrono::steady_clock::now();
  struct ResetOnExit {  // also when a wait throws: the next step starts clean
    Reducer* reducer;
    ~ResetOnExit() { reducer->reset(); }
  } reset_on_exit{this};
  // The overlap: buckets whose all-reduce ran to the end while backward was still computing.
  for (size_t b = 0; b < next_launch_; ++b)
    if (buckets_[b].work->is_completed()) stats_.bytes_overlapped += bytes_of(buckets_[b].flat);
  // Parameters this backward did not reach: their .grad() so far (no_sync), else zeros.
  for (size_t k = 0; k < slots_.size(); ++k)
    if (!slots_[k].ready) mark_ready(k, slots_[k].param.grad());
  launch_ready_buckets();
  const auto wait_start = std::chrono::steady_clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    try {
      buckets_[b].work->wait();
    } catch (const Error& e) {
      HG_FAIL("DataParallel: averaging the gradients of bucket ", b, " (", buckets_[b].slots.size(), " parameters, first '",
              slots_[buckets_[b].slots.front()].name, "') failed: ", e.what());
    }
  }
  stats_.wait_seconds += seconds_since(wait_start);
  NoGradGuard no_grad;
  for (Slot& slot : slots_) {
    const Tensor average = view_of(slot);
    const Tensor grad = slot.param.grad();
    if (grad.defined()) grad.detach().copy_(average);
    else slot.param.set_grad(average.dtype() == slot.param.dtype() ? average.clone() : average.to(slot.param.dtype()));
  }
  ++stats_.syncs;
  stats_.bytes = 0;
  for (const Bucket& bucket : buckets_) stats_.bytes += bytes_of(bucket.flat);
  stats_.finish_seconds += seconds_since(start);
}

void Reducer::reset() {
  for (Slot& slot : slots_) slot.ready = false;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.slots.size();
    bucket.work.reset();  // (waits for a collective still in flight: its buffer is ours)
  }
  next_launch_ = 0;
  syncing_ = false;
}

}  // namespace hg::distributed
