// The seam between ProcessGroup (checks, headers, copies, deadlines: process_group.cpp) and the
// libraries that move the bytes: MPI for host memory (mpi/mpi_backend.cpp) and NCCL for CUDA
// memory (nccl/nccl_backend.cpp). A backend only starts collectives on contiguous buffers and
// says when they are done; it never blocks, so the caller owns every wait and its deadline.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "distributed/process_group.h"

namespace hg::distributed::detail {

class CollectiveWork;  // process_group.cpp

// A collective a backend has started.
class Transfer {
 public:
  virtual ~Transfer() = default;
  // Polls without blocking: true once the collective has completed on this rank (for NCCL: once
  // the compute stream is ordered after it). Throws hg::Error on a transport failure.
  virtual bool test() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "MPI", "NCCL"
  // Contiguous buffers on the backend's device. all_reduce takes f32, f64, i32, i64 or u8;
  // broadcast and all_gather move raw elements of any dtype. `count` is in elements.
  virtual std::unique_ptr<Transfer> all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual std::unique_ptr<Transfer> broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  virtual std::unique_ptr<Transfer> all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // Called once when the group breaks (a timeout): stop what can be stopped (NCCL aborts its
  // communicator so that its kernels exit and the GPU stream moves on).
  virtual void on_broken() {}
};

// The element types the backends move, from the dtype table's size and kind. 16-bit floats are
// only ever moved as raw 16-bit words, never reduced (process_group.cpp widens them to f32).
enum class WireType { F32, F64, I64, I32, Bits16, U8 };
inline WireType wire_type(DType dtype) {
  const size_t size = element_size(dtype);
  if (is_floating(dtype) && size == 4) return WireType::F32;
  if (is_floating(dtype) && size == 8) return WireType::F64;
  if (size == 8) return WireType::I64;
  if (size == 4) return WireType::I32;
  return size == 2 ? WireType::Bits16 : WireType::U8;
}

// Where this process stands in the job.
struct World {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks on this machine
};

// What a ProcessGroup and its Work objects share.
struct GroupState {
  World world;
  // NOTE: two MPI communicators. MPI matches collectives on a communicator by the order they
  // start, and a payload starts only once its header has arrived, so headers and payloads
  // interleave differently on different ranks; each kind keeps its own order on its own one.
  std::unique_ptr<Backend> control;  // MPI: every collective's header
  std::unique_ptr<Backend> host;     // MPI: CPU tensors
  std::unique_ptr<Backend> device;   // NCCL: CUDA tensors, created by the first CUDA collective
  int device_index = -1;            // the GPU `device` was created for
  std::chrono::milliseconds timeout{};
  int64_t sequence = 0;             // collectives started so far: numbered in headers and messages
  // Collectives whose header exchange is in flight, oldest first. A payload may start only after
  // every older one has: MPI matches collectives by the order they start, so that order must be
  // the same on every rank however the caller polls them (process_group.cpp).
  std::deque<std::shared_ptr<CollectiveWork>> unstarted;
  std::string broken;               // the failure that broke the group; empty while it is usable
  // Ends every rank (MPI_Abort).
  void (*abort)(int code) = nullptr;
};

// Polls `transfer` until it completes; past the group's deadline (counted from `started`) it
// breaks the group and throws hg::Error naming `what`, the rank and the timeout.
void wait_for(GroupState& group, Transfer& transfer, const std::string& what,
              std::chrono::steady_clock::time_point started);

// Provided by mpi/mpi_backend.cpp, or by stubs/no_mpi.cpp (where it throws): joins the job and
// fills world, control, host, timeout and abort.
std::shared_ptr<GroupState> make_mpi_group(const InitOptions& options);
bool mpi_built();

// Provided by nccl/nccl_backend.cpp, or by stubs/no_nccl.cpp (where it throws): a communicator
// over every rank's GPU `device_index`, its unique id broadcast through group.host.
std::unique_ptr<Backend> make_nccl_backend(GroupState& group, int device_index);
bool nccl_built();

}  // namespace hg::distributed::detail
