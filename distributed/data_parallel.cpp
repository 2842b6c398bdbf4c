// DataParallel (see data_parallel.h): the model check and broadcast at construction, the buffer
// broadcast at each forward, and the GradScaler agreement.
#include "distributed/data_parallel.h"

#include <sstream>

#include "autograd/grad_mode.h"

namespace hg::distributed {

namespace {

// Names, shapes and dtypes of a module's parameters and buffers, folded into one number (FNV-1a).
int64_t structure_hash(const nn::Module& module) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const auto& list : {module.named_parameters(), module.named_buffers()}) {
    for (const auto& [name, t] : list) {
      for (char c : name) mix(uint8_t(c));
      for (int64_t d : t.shape()) mix(uint64_t(d));
      mix(uint64_t(t.dtype()));
    }
    mix(0xff);
  }
  return int64_t(h >> 1);
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                           DataParallelOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  HG_CHECK(module_ != nullptr && group_ != nullptr, "DataParallel: needs a module and a process group");
  check_same_model();
  // Every rank starts from rank 0's weights (and buffers), whatever its own initialisation drew.
  for (const Tensor& p : module_->parameters()) group_->broadcast(p, 0);
  for (const Tensor& b : module_->buffers()) group_->broadcast(b, 0);
  const auto cap = int64_t(options_.bucket_cap_mb * 1024 * 1024);
  reducer_ = std::make_unique<Reducer>(module_->named_parameters(), group_, cap);
}

void DataParallel::check_same_model() {
  const std::vector<int64_t> mine = {int64_t(module_->named_parameters().size()), int64_t(module_->named_buffers().size()),
                                     structure_hash(*module_)};
  const std::vector<Tensor> all = group_->all_gather(from_vector(mine, {3}));
  std::ostringstream differ;
  for (int r = 1; r < group_->world_size(); ++r) {
    const std::vector<int64_t> theirs = all[size_t(r)].to_vector<int64_t>();
    if (theirs != all[0].to_vector<int64_t>())
      differ << "; rank " << r << ": " << theirs[0] << " parameters, " << theirs[1] << " buffers";
  }
  const std::vector<int64_t> first = all[0].to_vector<int64_t>();
  HG_CHECK(differ.str().empty(), "DataParallel: the ranks hold different models (names, shapes or dtypes of parameters "
           "and buffers differ): rank 0: ", first[0], " parameters, ", first[1], " buffers", differ.str(),
           ". Build the same model on every rank.");
}

void DataParallel::broadcast_buffers() {
  for (const Tensor& b : module_->buffers()) group_->broadcast(b, 0);
}

Tensor DataParallel::forward(const Tensor& x) {
  reducer_->prepare_for_backward();
  if (options_.broadcast_buffers && module_->is_training() && GradMode::is_enabled()) broadcast_buffers();
  return module_->forward(x);
}

void DataParallel::attach(amp::GradScaler& scaler) { sync_grad_scaler(scaler, group_); }

void sync_grad_scaler(amp::GradScaler& scaler, std::shared_ptr<ProcessGroup> group) {
  HG_CHECK(group != nullptr, "sync_grad_scaler: no process group");
  scaler.set_found_inf_sync([group](const Tensor& found_inf) { group->all_reduce(found_inf, {.op = ReduceOp::Max}); });
}

}  // namespace hg::distributed
