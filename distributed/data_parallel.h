// DataParallel: halfgrad's DistributedDataParallel. Every rank holds a full copy of the model and
// trains on its own shard of each batch; after backward every rank holds the same gradients (the
// average over all ranks' samples), so the same optimizer step keeps the copies identical.
//
//   auto pg = hg::distributed::init();                      // launched with mpirun -np N
//   hg::distributed::DataParallel ddp(model, pg);           // broadcasts rank 0's parameters
//   hg::data::DataLoader loader(train, {.batch_size = 64, .num_replicas = pg->world_size(),
//                                       .rank = pg->rank()}); // a disjoint shard per rank
//   hg::optim::SGD opt(model.parameters(), {.lr = 0.05});
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     hg::cross_entropy(ddp(x), y).backward();              // all-reduces overlap backward
//     opt.step();
//   }
//
// With a GradScaler, call ddp.attach(scaler): a step with inf/NaN on any rank is skipped on all.
// Gradient accumulation: backward inside `auto guard = ddp.no_sync();` only accumulates locally;
// the next backward outside it averages the sum. Gradients are averaged in buckets (25 MiB by
// default, like PyTorch); see reducer.h for how and when, and what a parameter without a
// gradient gets (zeros, the same on every rank).
#pragma once
#include <concepts>
#include <memory>
#include <string>
#include <vector>

#include "amp_tools/grad_scaler.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "nn/module.h"

namespace hg::distributed {

struct DataParallelOptions {
  double bucket_cap_mb = 25.0;    // gradient bytes per all-reduce (in f32 for 16-bit parameters)
  bool broadcast_buffers = true;  // rank 0's buffers (BatchNorm statistics) go to every rank at each training forward
};

class DataParallel {
 public:
  // Wraps `module` (a copy of a module shares its parameters, so the caller's model trains).
  template <class M>
    requires std::derived_from<M, nn::Module>
  DataParallel(M& module, std::shared_ptr<ProcessGroup> group, DataParallelOptions options = {})
      : DataParallel(std::shared_ptr<nn::Module>(std::make_shared<M>(module)), std::move(group), options) {}
  DataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group, DataParallelOptions options = {});

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Module& module() { return *module_; }
  std::vector<Tensor> parameters() const { return module_->parameters(); }
  ProcessGroup& process_group() { return *group_; }

  // While alive, backward does not sync (gradient accumulation over micro-batches).
  class [[nodiscard]] NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& reducer) : reducer_(&reducer), previous_(reducer.enabled()) { reducer.set_enabled(false); }
    ~NoSyncGuard() { reducer_->set_enabled(previous_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  // Makes `scaler` agree across ranks (sync_grad_scaler with this group).
  void attach(amp::GradScaler& scaler);

  const SyncStats& sync_stats() const { return reducer_->stats(); }
  void reset_sync_stats() { reducer_->reset_stats(); }
  std::vector<std::vector<std::string>> bucket_names() const { return reducer_->bucket_names(); }

 private:
  void check_same_model();
  void broadcast_buffers();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DataParallelOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

// Installs an all-reduce (max) of the scaler's found_inf flag (GradScaler::set_found_inf_sync):
// if any rank's gradients hold inf/NaN, every rank skips the step and backs off its scale, so the
// model copies never diverge. On CUDA the flag is reduced on the device (NCCL): no host sync.
void sync_grad_scaler(amp::GradScaler& scaler, std::shared_ptr<ProcessGroup> group);

}  // namespace hg::distributed
