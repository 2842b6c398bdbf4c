// The NCCL backend: collectives on CUDA memory. halfgrad's kernels run on the legacy default
// stream; NCCL runs on a stream of its own so that an all-reduce overlaps the backward kernels
// queued after it. Events order the two, and the host never waits for the GPU:
//   default stream:  ... kernels that wrote the buffer -> [ready]          ... -> (waits for done) -> kernels that read it
//   NCCL stream:                                  (waits for ready) -> ncclAllReduce -> [done]
// The communicator is bootstrapped through MPI (rank 0 draws the unique id, MPI broadcasts it).
//
// Timeouts: the host does not wait, so a deadline cannot be checked where a collective is waited
// for. A watchdog thread (PyTorch's ProcessGroupNCCL has one too) polls every collective's done
// event; one still pending past the group's timeout makes it abort the communicator (NCCL's
// kernels then exit and the GPU moves on), report the collective, rank and timeout on stderr,
// and the next call into this backend throws that hg::Error. The results of the aborted
// collective are garbage: the group is unusable from then on, as with MPI.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <mutex>
#include <thread>

#include "core/cuda/cuda_check.h"
#include "distributed/backend.h"

namespace hg::distributed::detail {

namespace {

#define HG_NCCL_CHECK(call, comm)                                                                               \
  do {                                                                                                          \
    const ncclResult_t hg_nccl_rc_ = (call);                                                                    \
    if (hg_nccl_rc_ != ncclSuccess && hg_nccl_rc_ != ncclInProgress)                                            \
      HG_FAIL("hg::distributed: ", #call, " failed: ", ncclGetErrorString(hg_nccl_rc_),                         \
              (comm) != nullptr ? std::string(" (") + ncclGetLastError(comm) + ")" : std::string());            \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (wire_type(dtype)) {
    case WireType::F32: return ncclFloat32;
    case WireType::F64: return ncclFloat64;
    case WireType::I64: return ncclInt64;
    case WireType::I32: return ncclInt32;
    case WireType::Bits16: return ncclFloat16;  // raw 2-byte words: moved, never reduced
    case WireType::U8: return ncclUint8;
  }
  HG_FAIL("hg::distributed: no NCCL type for ", dtype);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  HG_FAIL("hg::distributed: unknown reduce op");
}

struct Event {
  cudaEvent_t event = nullptr;
  Event() { HG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// Polls the done events of the collectives in flight (see the top of the file).
class Watchdog {
 public:
  Watchdog(ncclComm_t comm, int device, int rank) : comm_(comm), device_(device), rank_(rank) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void track(std::shared_ptr<Event> done, std::chrono::steady_clock::time_point deadline, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back({std::move(done), deadline, std::move(what)});
  }
  // The failure that aborted the communicator, or empty.
  std::string failure() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }
  bool aborted() const { return aborted_.load(); }
  // Aborts the communicator once (from the watchdog or when the group breaks elsewhere).
  void abort(const std::string& why) {
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty()) failure_ = why;
    }
    ncclCommAbort(comm_);
  }

 private:
  struct Entry {
    std::shared_ptr<Event> done;
    std::chrono::steady_clock::time_point deadline;
    std::string what;
  };

  void run() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_ && !aborted_.load()) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      std::string expired;
      for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        const cudaError_t state = cudaEventQuery(it->done->event);
        if (state == cudaSuccess) {
          it = in_flight_.erase(it);
          continue;
        }
        if (state == cudaErrorNotReady && std::chrono::steady_clock::now() > it->deadline && expired.empty()) expired = it->what;
        ++it;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::string why;
      if (!expired.empty())
        why = ::hg::detail::str("hg::distributed: NCCL ", expired, " timed out on rank ", rank_,
                          ": another rank did not join it (it exited, hangs, or runs different code). The communicator "
                          "was aborted and the process group is unusable; end the program");
      else if (async != ncclSuccess && async != ncclInProgress)
        why = ::hg::detail::str("hg::distributed: NCCL failed on rank ", rank_, ": ", ncclGetErrorString(async), " (",
                          ncclGetLastError(comm_), ")");
      if (why.empty()) continue;
      lock.unlock();
      std::fprintf(stderr, "%s\n", why.c_str());
      abort(why);
      lock.lock();
    }
  }

  ncclComm_t comm_;
  int device_, rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Entry> in_flight_;
  std::string failure_;
  std::atomic<bool> aborted_{false};
  bool stop_ = false;
  std::thread thread_;
};

class NcclTransfer final : public Transfer {
 public:
  NcclTransfer(std::shared_ptr<Event> done, Watchdog& watchdog) : done_(std::move(done)), watchdog_(watchdog) {}
  // "Complete" for the host once the default stream is ordered after the collective: what reads
  // the result runs after it, and the host goes on at once.
  bool test() override {
    const std::string failure = watchdog_.failure();
    HG_CHECK(failure.empty(), failure);
    HG_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, done_->event, 0));
    return true;
  }

 private:
  std::shared_ptr<Event> done_;
  Watchdog& watchdog_;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(GroupState& group, int device) : group_(group), device_(device) {
    HG_CUDA_CHECK(cudaSetDevice(device));
    const auto started = std::chrono::steady_clock::now();
    ncclUniqueId id{};
    if (group.world.rank == 0) HG_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    auto bcast = group.host->broadcast(&id, int64_t(sizeof id), u8, 0);
    wait_for(group, *bcast, "NCCL init (broadcasting the unique id)", started);
    // Non-blocking: ncclCommAbort may then be called while an operation is pending.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    HG_NCCL_CHECK(ncclCommInitRankConfig(&comm_, group.world.world_size, id, group.world.rank, &config), nullptr);
    wait_until_ready("NCCL init", started);
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    watchdog_ = std::make_unique<Watchdog>(comm_, device, group.world.rank);
  }

  ~NcclBackend() override {
    // Collectives still queued are let finish, within the timeout (a peer may be gone): then the
    // communicator is destroyed, or else aborted.
    const auto deadline = std::chrono::steady_clock::now() + group_.timeout;
    while (!watchdog_->aborted() && cudaStreamQuery(stream_) == cudaErrorNotReady &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!watchdog_->aborted() && cudaStreamQuery(stream_) == cudaSuccess) {
      watchdog_.reset();
      ncclCommDestroy(comm_);
    } else {
      watchdog_->abort("the process group was destroyed with collectives still pending");
      watchdog_.reset();
    }
    cudaStreamDestroy(stream_);
  }
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  const char* name() const override { return "NCCL"; }

  std::unique_ptr<Transfer> all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    return enqueue(::hg::detail::str("all_reduce of ", count, " ", dtype), [&](cudaStream_t stream) {
      return ncclAllReduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream);
    });
  }

  std::unique_ptr<Transfer> broadcast(void* data, int64_t count, DType dtype, int root) override {
    return enqueue(::hg::detail::str("broadcast of ", count, " ", dtype), [&](cudaStream_t stream) {
      return ncclBroadcast(data, data, size_t(count), nccl_type(dtype), root, comm_, stream);
    });
  }

  std::unique_ptr<Transfer> all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    return enqueue(::hg::detail::str("all_gather of ", count, " ", dtype), [&](cudaStream_t stream) {
      return ncclAllGather(send, recv, size_t(count), nccl_type(dtype), comm_, stream);
    });
  }

  void on_broken() override { watchdog_->abort(group_.broken); }

 private:
  // A non-blocking communicator may answer ncclInProgress: poll until it settles.
  void wait_until_ready(const char* what, std::chrono::steady_clock::time_point started) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      HG_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
      if (state == ncclInProgress && std::chrono::steady_clock::now() - started > group_.timeout) {
        ncclCommAbort(comm_);
        HG_FAIL("hg::distributed: ", what, " timed out on rank ", group_.world.rank, " of ", group_.world.world_size,
                ": another rank did not join it");
      }
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    HG_NCCL_CHECK(state, comm_);
  }

  template <class Launch>
  std::unique_ptr<Transfer> enqueue(std::string what, Launch launch) {
    const std::string failure = watchdog_->failure();
    HG_CHECK(failure.empty(), failure);
    HG_CUDA_CHECK(cudaSetDevice(device_));
    const auto started = std::chrono::steady_clock::now();
    auto ready = std::make_shared<Event>();
    HG_CUDA_CHECK(cudaEventRecord(ready->event, cudaStreamLegacy));  // after the kernels that wrote the buffer
    HG_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready->event, 0));
    HG_NCCL_CHECK(launch(stream_), comm_);
    wait_until_ready(what.c_str(), started);
    auto done = std::make_shared<Event>();
    HG_CUDA_CHECK(cudaEventRecord(done->event, stream_));
    watchdog_->track(done, started + group_.timeout, what);
    return std::make_unique<NcclTransfer>(std::move(done), *watchdog_);
  }

  GroupState& group_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Backend> make_nccl_backend(GroupState& group, int device_index) {
  return std::make_unique<NcclBackend>(group, device_index);
}

}  // namespace hg::distributed::detail
