// The MPI backend: joins the job mpirun started and runs collectives on host memory with MPI's
// non-blocking calls (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather), so that the caller can poll
// them against a deadline (MPI itself has no timeout) and overlap them with backward.
//
// NOTE: Open MPI moves a non-blocking collective forward only inside MPI calls. The caller's
// polling (Transfer::test, i.e. MPI_Testall) is what makes it progress; DataParallel polls from
// every gradient hook for that reason.
// halfgrad uses MPI's C API only: skip the deprecated C++ bindings mpi.h would pull in.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "distributed/backend.h"

namespace hg::distributed::detail {

namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, size_t(length));
}

#define HG_MPI_CHECK(call)                                                                                  \
  do {                                                                                                      \
    const int hg_mpi_rc_ = (call);                                                                          \
    if (hg_mpi_rc_ != MPI_SUCCESS) HG_FAIL("hg::distributed: ", #call, " failed: ", mpi_error(hg_mpi_rc_)); \
  } while (0)

// MPI is process-wide: initialised by the first init() (unless the program did it) and finalised
// when the process exits -- unless a group broke, since MPI_Finalize would then wait for a peer
// that never comes. The one piece of global state here, because MPI itself is global; keeping it
// to the end lets a program create (and drop) several process groups.
struct MpiRuntime {
  bool initialised_here = false;
  bool broken = false;
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialised_here && !broken && !finalized) MPI_Finalize();
  }
};

MpiRuntime& acquire_runtime() {
  static MpiRuntime runtime;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  HG_CHECK(!finalized, "hg::distributed::init: MPI was already finalised in this process (it cannot start twice)");
  if (!initialized) {
    // SERIALIZED: halfgrad calls MPI from whichever thread runs the training loop, one at a time.
    int provided = 0;
    HG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    runtime.initialised_here = true;
  }
  return runtime;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (wire_type(dtype)) {
    case WireType::F32: return MPI_FLOAT;
    case WireType::F64: return MPI_DOUBLE;
    case WireType::I64: return MPI_INT64_T;
    case WireType::I32: return MPI_INT32_T;
    case WireType::Bits16: return MPI_UINT16_T;
    case WireType::U8: return MPI_UINT8_T;
  }
  HG_FAIL("hg::distributed: no MPI type for ", dtype);
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  HG_FAIL("hg::distributed: unknown reduce op");
}

class MpiTransfer final : public Transfer {
 public:
  std::vector<MPI_Request> requests;
  bool test() override {
    int done = 0;
    HG_MPI_CHECK(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }
};

// MPI counts are int: a larger buffer goes as several collectives, started in the same order on
// every rank. start(chunk, n, request) starts one and returns MPI's error code.
constexpr int64_t kMaxCount = INT_MAX / 2;

template <class Start>
std::unique_ptr<MpiTransfer> in_chunks(void* data, int64_t count, DType dtype, const Start& start) {
  auto transfer = std::make_unique<MpiTransfer>();
  char* bytes = static_cast<char*>(data);
  for (int64_t first = 0; first < count; first += kMaxCount) {
    const int rc = start(bytes + first * int64_t(element_size(dtype)), int(std::min(kMaxCount, count - first)),
                         &transfer->requests.emplace_back());
    if (rc != MPI_SUCCESS) HG_FAIL("hg::distributed: starting an MPI collective failed: ", mpi_error(rc));
  }
  return transfer;
}

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, MpiRuntime& runtime) : comm_(comm), runtime_(runtime) {}
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!runtime_.broken && !finalized) MPI_Comm_free(&comm_);
  }
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  const char* name() const override { return "MPI"; }

  std::unique_ptr<Transfer> all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    return in_chunks(data, count, dtype, [&](void* chunk, int n, MPI_Request* request) {
      return MPI_Iallreduce(MPI_IN_PLACE, chunk, n, mpi_type(dtype), mpi_op(op), comm_, request);
    });
  }

  std::unique_ptr<Transfer> broadcast(void* data, int64_t count, DType dtype, int root) override {
    return in_chunks(data, count, dtype, [&](void* chunk, int n, MPI_Request* request) {
      return MPI_Ibcast(chunk, n, mpi_type(dtype), root, comm_, request);
    });
  }

  std::unique_ptr<Transfer> all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    HG_CHECK(count <= INT_MAX, "all_gather: at most ", INT_MAX, " elements per rank over MPI, got ", count);
    auto transfer = std::make_unique<MpiTransfer>();
    MPI_Request& r = transfer->requests.emplace_back();
    HG_MPI_CHECK(MPI_Iallgather(send, int(count), mpi_type(dtype), recv, int(count), mpi_type(dtype), comm_, &r));
    return transfer;
  }

  void on_broken() override { runtime_.broken = true; }

 private:
  MPI_Comm comm_;
  MpiRuntime& runtime_;
};

// A machine's identity: a hash of its processor name (FNV-1a), gathered to count the ranks
// that share it.
int64_t host_hash() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < length; ++i) h = (h ^ uint8_t(name[i])) * 1099511628211ull;
  return int64_t(h >> 1);
}

void abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this is for the compiler and for broken launchers
}

}  // namespace

bool mpi_built() { return true; }

std::shared_ptr<GroupState> make_mpi_group(const InitOptions& options) {
  HG_CHECK(options.timeout.count() > 0, "hg::distributed::init: the timeout must be positive");
  MpiRuntime& runtime = acquire_runtime();
  auto group = std::make_shared<GroupState>();
  group->timeout = options.timeout;
  group->abort = &abort_job;
  const auto started = std::chrono::steady_clock::now();
  // Communicators of our own (one for headers, one for data: see GroupState), so the program's
  // other MPI traffic never mixes with ours. Errors come back as codes (hg::Error), not fatal.
  // Duplicated non-blockingly, so that even joining the group has a deadline.
  MPI_Comm comms[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
  MpiTransfer dup;
  dup.requests.reserve(2);
  for (MPI_Comm& comm : comms) HG_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &dup.requests.emplace_back()));
  MPI_Comm_rank(MPI_COMM_WORLD, &group->world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &group->world.world_size);
  try {
    wait_for(*group, dup, "init (duplicating MPI_COMM_WORLD)", started);
  } catch (...) {
    runtime.broken = true;  // a peer never arrived: finalising would wait for it forever
    throw;
  }
  for (MPI_Comm comm : comms) HG_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  group->control = std::make_unique<MpiBackend>(comms[0], runtime);
  group->host = std::make_unique<MpiBackend>(comms[1], runtime);

  std::vector<int64_t> hosts(size_t(group->world.world_size));
  const int64_t mine = host_hash();
  auto gather = group->control->all_gather(&mine, hosts.data(), 1, i64);
  wait_for(*group, *gather, "init (finding the ranks on this machine)", started);
  group->world.local_rank = group->world.local_size = 0;
  for (int r = 0; r < group->world.world_size; ++r) {
    if (hosts[size_t(r)] != mine) continue;
    if (r < group->world.rank) ++group->world.local_rank;
    ++group->world.local_size;
  }
  return group;
}

}  // namespace hg::distributed::detail
