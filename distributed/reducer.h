// Reducer: averages a model's gradients across the ranks of a ProcessGroup while backward runs
// (the engine of DataParallel; PyTorch's Reducer had the idea).
//
// Parameters are packed into buckets, in reverse registration order (roughly the order backward
// produces their gradients; the last layer's come first). Each bucket owns one flat buffer. When
// backward has accumulated a parameter's gradient (a post-accumulate-grad hook), the gradient is
// copied into its bucket; when a bucket is full its all-reduce starts, while backward goes on with
// the earlier layers. At the end of backward (an engine callback) the reducer starts the buckets
// that are left, waits for all of them and writes the averages back into every .grad().
//
// Buckets start strictly in index order (a ready bucket waits for the ones before it): every
// rank must start the same collectives in the same order.
//
// A parameter that got no gradient in this backward contributes its current .grad() (left by
// no_sync micro-batches) or zeros; afterwards every rank holds the same, defined average for it.
// Ranks therefore never diverge, at the price of a zero gradient (not "none") for a parameter
// that no rank used: with weight decay or momentum the optimizer still moves it.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group.h"

namespace hg::distributed {

// Counters of the gradient syncs so far (DataParallel::sync_stats).
struct SyncStats {
  int64_t syncs = 0;           // backward passes whose gradients were averaged
  int64_t bytes = 0;           // bytes all-reduced per sync (the buckets' sizes)
  int64_t bytes_overlapped = 0;  // summed over syncs: bytes whose all-reduce had finished when backward did
  double wait_seconds = 0;     // time blocked at the end of backward waiting for all-reduces to finish
  double finish_seconds = 0;   // the whole end-of-backward step: starting the rest, waiting, copying back
};

class Reducer {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> parameters, std::shared_ptr<ProcessGroup> group,
          int64_t bucket_cap_bytes);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Forgets a sync that an exception interrupted; DataParallel calls it at every forward.
  void prepare_for_backward();
  // Off: backward only accumulates locally (no_sync); the next synced backward averages the sum.
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  const SyncStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  // Parameter names per bucket, in the order the buckets start.
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  struct Slot {
    Tensor param;
    std::string name;
    size_t bucket = 0;
    int64_t offset = 0;  // into the bucket's flat buffer, in elements
    int64_t hook = 0;
    bool ready = false;  // its gradient is in the bucket for this backward
  };
  struct Bucket {
    Tensor flat;  // f32 for 16-bit parameters (reduced in f32), else the parameters' dtype
    std::vector<size_t> slots;
    size_t pending = 0;  // slots not yet ready
    std::shared_ptr<Work> work;
  };

  void build_buckets(int64_t bucket_cap_bytes);
  Tensor view_of(const Slot& slot) const;  // the slot's part of its bucket, shaped like the parameter
  void on_gradient(size_t slot);
  void mark_ready(size_t slot, const Tensor& grad);
  void launch_ready_buckets();
  void poll_launched();
  void finish();
  void reset();

  std::shared_ptr<ProcessGroup> group_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;  // the first bucket not started yet
  bool enabled_ = true;
  bool syncing_ = false;    // this backward's end-of-backward callback is queued
  SyncStats stats_;
};

}  // namespace hg::distributed
