// ProcessGroup: argument checks, the copy into and out of a contiguous buffer, the header that
// every collective exchanges first, and the deadline of every wait. The backends behind it only
// start collectives and report when they are done (distributed/backend.h).
//
// A collective is a CollectiveWork that goes through three stages:
//   header   all ranks' headers are gathered (host memory, MPI); a disagreement fails it on every rank
//   payload  the data moves (MPI for CPU tensors, NCCL for CUDA tensors)
//   done     results are copied back (and divided by world_size for an average)
#include "distributed/process_group.h"

#include <cstdlib>
#include <functional>
#include <thread>

#include "autograd/grad_mode.h"
#include "distributed/backend.h"
#include "distributed/collective_header.h"
#include "ops/shape.h"

namespace hg::distributed {

namespace detail {

namespace {

std::string format_duration(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

void check_usable(const GroupState& group) {
  HG_CHECK(group.broken.empty(), "hg::distributed: the process group is unusable after an earlier failure (", group.broken,
           ")");
}

// Marks the group broken (every later call throws `message`), lets the backends stop what they
// can, and throws.
[[noreturn]] void break_group(GroupState& group, const std::string& message) {
  if (group.broken.empty()) {
    group.broken = message;
    group.unstarted.clear();
    if (group.control) group.control->on_broken();
    if (group.host) group.host->on_broken();
    if (group.device) group.device->on_broken();
  }
  HG_FAIL(message);
}

std::string timeout_message(const GroupState& group, const std::string& what, const char* stage) {
  return ::hg::detail::str("hg::distributed: ", what, " timed out after ", format_duration(group.timeout), " on rank ",
                     group.world.rank, " of ", group.world.world_size, " ", stage,
                     ": another rank did not join it (it exited, hangs, or runs different code). The process group is "
                     "unusable now; end the program (ProcessGroup::abort ends every rank)");
}

// Between polls: for the first 2 ms only yield the core (the usual wait, for a peer a little
// behind, ends within it, and yield costs nothing when no other thread wants the core); after
// that sleep between polls, leaving the core to the peer on a busy machine.
class Backoff {
 public:
  void pause() {
    if (std::chrono::steady_clock::now() - start_ < std::chrono::milliseconds(2)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

void wait_for(GroupState& group, Transfer& transfer, const std::string& what,
              std::chrono::steady_clock::time_point started) {
  Backoff backoff;
  while (true) {
    bool done = false;
    try {
      done = transfer.test();
    } catch (const Error& e) {
      break_group(group, ::hg::detail::str(e.what(), " (in ", what, " on rank ", group.world.rank, ")"));
    }
    if (done) return;
    if (std::chrono::steady_clock::now() - started > group.timeout)
      break_group(group, timeout_message(group, what, "(waiting for the other ranks)"));
    backoff.pause();
  }
}

// One collective in flight; see the stages at the top of the file.
class CollectiveWork final : public Work {
 public:
  using StartPayload = std::function<std::unique_ptr<Transfer>()>;  // may return null: nothing to move
  using Finish = std::function<void()>;

  CollectiveWork(std::shared_ptr<GroupState> group, const Header& header, StartPayload start, Finish finish)
      : group_(std::move(group)),
        header_(header),
        what_(describe(header)),
        start_(std::move(start)),
        finish_(std::move(finish)),
        started_(std::chrono::steady_clock::now()) {}

  // Queues the header exchange (the caller keeps the returned handle).
  static std::shared_ptr<CollectiveWork> launch(std::shared_ptr<GroupState> group, const Header& header,
                                                StartPayload start, Finish finish) {
    auto work = std::make_shared<CollectiveWork>(group, header, std::move(start), std::move(finish));
    work->gathered_.resize(size_t(group->world.world_size) * kHeaderWords);
    work->transfer_ = group->control->all_gather(work->header_.data(), work->gathered_.data(), kHeaderWords, i64);
    group->unstarted.push_back(work);
    return work;
  }

  ~CollectiveWork() override {
    // MPI may still write into our buffers: a collective in flight is finished before they go.
    if (stage_ == Stage::Payload && group_->broken.empty()) {
      try {
        wait();
      } catch (const Error&) {  // a destructor cannot report it; the group is broken for the next call
      }
    }
  }

  bool is_completed() override { return advance(); }

  void wait() override {
    Backoff backoff;
    while (!advance()) backoff.pause();
  }

  // Header stage only: if the header exchange finished, checks it and starts the payload.
  // False while the headers are still in flight.
  bool try_start_payload() {
    if (!poll(*transfer_)) return false;
    const std::string mismatch = check_headers(gathered_, group_->world.world_size, group_->world.rank);
    if (!mismatch.empty()) {
      error_ = mismatch;
      stage_ = Stage::Failed;
      return true;
    }
    try {
      transfer_ = start_();
    } catch (const Error& e) {
      error_ = e.what();  // e.g. a CUDA tensor without NCCL: the same on every rank, nothing started
      stage_ = Stage::Failed;
      return true;
    }
    stage_ = Stage::Payload;
    return true;
  }

 private:
  enum class Stage { Header, Payload, Done, Failed };

  bool advance() {
    if (stage_ == Stage::Done) return true;
    if (stage_ == Stage::Failed) HG_FAIL(error_);
    check_usable(*group_);
    start_payloads_in_order(*group_);
    if (stage_ == Stage::Failed) HG_FAIL(error_);
    if (stage_ == Stage::Payload && (!transfer_ || poll(*transfer_))) {
      transfer_.reset();
      stage_ = Stage::Done;
      finish_();
      return true;
    }
    if (std::chrono::steady_clock::now() - started_ > group_->timeout) {
      const char* where = stage_ == Stage::Header ? "(waiting for the other ranks to start it)"
                                                  : "(exchanging data: a peer stopped midway)";
      break_group(*group_, timeout_message(*group_, what_, where));
    }
    return false;
  }

  bool poll(Transfer& transfer) {
    try {
      return transfer.test();
    } catch (const Error& e) {
      break_group(*group_, ::hg::detail::str(e.what(), " (in ", what_, " on rank ", group_->world.rank, ")"));
    }
  }

  static void start_payloads_in_order(GroupState& group) {
    while (!group.unstarted.empty() && group.unstarted.front()->try_start_payload()) {
      // Out of the queue before it may die: if the queue held the last handle, its destructor
      // waits for the payload, and that wait comes back here.
      const std::shared_ptr<CollectiveWork> started = std::move(group.unstarted.front());
      group.unstarted.pop_front();
    }
  }

  std::shared_ptr<GroupState> group_;
  Header header_;
  std::string what_;
  StartPayload start_;
  Finish finish_;
  std::chrono::steady_clock::time_point started_;
  std::vector<int64_t> gathered_;
  std::unique_ptr<Transfer> transfer_;
  Stage stage_ = Stage::Header;
  std::string error_;
};

namespace {

Backend& backend_for(GroupState& group, Device device) {
  if (device.is_cpu()) return *group.host;
  if (!group.device) {
    group.device = make_nccl_backend(group, device.index());
    group.device_index = device.index();
  }
  HG_CHECK(group.device_index == device.index(), "hg::distributed: this rank's NCCL communicator was created for cuda:",
           group.device_index, ", not ", device, " (one GPU per rank: move the model to cuda:<local_rank>)");
  return *group.device;
}

void check_tensor(const Tensor& tensor, const char* op) {
  HG_CHECK(tensor.defined(), "hg::distributed::", op, ": undefined tensor");
}

}  // namespace

}  // namespace detail

using detail::Collective;
using detail::CollectiveWork;

ProcessGroup::ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

ProcessGroup::~ProcessGroup() {
  // Collectives whose header is still in flight are finished first (their buffers are ours).
  while (state_->broken.empty() && !state_->unstarted.empty()) {
    const std::shared_ptr<CollectiveWork> oldest = state_->unstarted.front();
    try {
      oldest->wait();
    } catch (const Error&) {  // reported to whoever waits on it; here we only drain
    }
    if (!state_->unstarted.empty() && state_->unstarted.front() == oldest) state_->unstarted.pop_front();
  }
}

int ProcessGroup::rank() const { return state_->world.rank; }
int ProcessGroup::world_size() const { return state_->world.world_size; }
int ProcessGroup::local_rank() const { return state_->world.local_rank; }
int ProcessGroup::local_size() const { return state_->world.local_size; }
std::chrono::milliseconds ProcessGroup::timeout() const { return state_->timeout; }
void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  HG_CHECK(timeout.count() > 0, "ProcessGroup::set_timeout: the timeout must be positive");
  state_->timeout = timeout;
}
bool ProcessGroup::is_broken() const { return !state_->broken.empty(); }

void ProcessGroup::abort(int code) {
  if (state_->abort) state_->abort(code);
  std::_Exit(code);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, AllReduceOptions options) {
  detail::check_tensor(tensor, "all_reduce");
  detail::check_usable(*state_);
  HG_CHECK(!options.average || (options.op == ReduceOp::Sum && is_floating(tensor.dtype())),
           "hg::distributed::all_reduce: average needs op Sum and a floating tensor, got ", tensor.dtype());
  NoGradGuard no_grad;
  Tensor target = tensor.detach();
  // NOTE: 16-bit values are summed in f32 and rounded once at the end: MPI has no 16-bit
  // arithmetic, and a 16-bit running sum over many ranks would lose their low bits.
  Tensor buffer = target.to(compute_dtype(target.dtype())).contiguous();
  const int world = world_size();
  detail::GroupState& group = *state_;
  auto start = [&group, buffer, op = options.op]() -> std::unique_ptr<detail::Transfer> {
    if (buffer.numel() == 0) return nullptr;
    return detail::backend_for(group, buffer.device()).all_reduce(buffer.raw_data(), buffer.numel(), buffer.dtype(), op);
  };
  auto finish = [target, buffer, average = options.average, world]() mutable {
    NoGradGuard no_grad;
    if (average) buffer.mul_(1.0 / double(world));
    if (!buffer.is_same(target)) target.copy_(buffer);
  };
  const detail::Header header = detail::all_reduce_header(state_->sequence++, target, options);
  return CollectiveWork::launch(state_, header, std::move(start), std::move(finish));
}

void ProcessGroup::all_reduce(const Tensor& tensor, AllReduceOptions options) { all_reduce_async(tensor, options)->wait(); }

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  detail::check_tensor(tensor, "broadcast");
  detail::check_usable(*state_);
  HG_CHECK(root >= 0 && root < world_size(), "hg::distributed::broadcast: root ", root, " outside the world of ",
           world_size(), " ranks");
  NoGradGuard no_grad;
  Tensor target = tensor.detach();
  Tensor buffer = target.contiguous();
  detail::GroupState& group = *state_;
  auto start = [&group, buffer, root]() -> std::unique_ptr<detail::Transfer> {
    if (buffer.numel() == 0) return nullptr;
    return detail::backend_for(group, buffer.device()).broadcast(buffer.raw_data(), buffer.numel(), buffer.dtype(), root);
  };
  auto finish = [target, buffer]() mutable {
    NoGradGuard no_grad;
    if (!buffer.is_same(target)) target.copy_(buffer);
  };
  const detail::Header header = detail::make_header(Collective::Broadcast, state_->sequence++, target, root);
  CollectiveWork::launch(state_, header, std::move(start), std::move(finish))->wait();
}

std::vector<Tensor> ProcessGroup::all_gather(const Tensor& tensor) {
  detail::check_tensor(tensor, "all_gather");
  detail::check_usable(*state_);
  NoGradGuard no_grad;
  const Tensor input = tensor.detach().contiguous();
  Shape gathered_shape = input.shape();
  gathered_shape.insert(gathered_shape.begin(), int64_t(world_size()));
  const Tensor gathered = empty(gathered_shape, {.dtype = input.dtype(), .device = input.device()});
  detail::GroupState& group = *state_;
  auto start = [&group, input, gathered]() -> std::unique_ptr<detail::Transfer> {
    if (input.numel() == 0) return nullptr;
    return detail::backend_for(group, input.device()).all_gather(input.raw_data(), gathered.raw_data(), input.numel(),
                                                                 input.dtype());
  };
  const detail::Header header = detail::make_header(Collective::AllGather, state_->sequence++, input, 0);
  CollectiveWork::launch(state_, header, std::move(start), [] {})->wait();
  std::vector<Tensor> out;
  for (int r = 0; r < world_size(); ++r) out.push_back(squeeze(narrow(gathered, 0, r, 1), 0));
  return out;
}

void ProcessGroup::barrier() {
  detail::check_usable(*state_);
  // The header exchange is itself a meeting of every rank: nothing else to move.
  const detail::Header header = detail::make_header(Collective::Barrier, state_->sequence++, Tensor(), 0);
  CollectiveWork::launch(state_, header, [] { return std::unique_ptr<detail::Transfer>(); }, [] {})->wait();
}

std::shared_ptr<ProcessGroup> init(InitOptions options) {
  return std::make_shared<ProcessGroup>(detail::make_mpi_group(options));
}

bool is_available() { return detail::mpi_built(); }
bool nccl_available() { return detail::nccl_built(); }

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) {
      const int size = std::atoi(value);
      if (size > 0) return size;
    }
  }
  return 1;
}

}  // namespace hg::distributed
