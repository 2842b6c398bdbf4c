// ProcessGroup: the processes of one training job (ranks 0 .. world_size-1, on one machine or
// many) and the collectives a data-parallel trainer needs. CPU tensors travel over MPI, CUDA
// tensors over NCCL (bootstrapped through MPI); the launcher decides where the ranks run:
//
//   mpirun -np 2 ./app                       # two processes on this machine
//   mpirun --hostfile hosts -np 8 ./app      # eight, on the machines listed in `hosts`
//
//   auto pg = hg::distributed::init();       // reads MPI's environment; world of 1 without mpirun
//   hg::Tensor g = ...;                      // same shape and dtype on every rank
//   pg->all_reduce(g, {.average = true});    // in place: every rank now holds the mean
//
// Every collective first exchanges a small header (which collective, dtype, shape, root), so a
// rank that passes a different tensor, or calls a different collective, gets an hg::Error that
// names each rank's tensor instead of corrupted memory. Every wait has a deadline (the group's
// timeout): a peer that died, hangs, or never arrives gives an hg::Error naming the collective,
// this rank and the timeout, never a hang. After a timeout the group is broken (MPI cannot cancel
// a collective that a peer never joined): every later call throws, and the program should end,
// e.g. with pg->abort(code), which ends every rank.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg::distributed {

enum class ReduceOp { Sum, Max, Min };

struct AllReduceOptions {
  ReduceOp op = ReduceOp::Sum;
  bool average = false;  // divide the sum by world_size (op must be Sum)
};

struct InitOptions {
  // How long any collective may wait for the other ranks before it throws. Generous by default:
  // a rank may legitimately be busy (evaluating, writing a checkpoint) while the others wait.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

// A collective in flight (the *_async calls). The tensor must stay untouched until it completes.
class Work {
 public:
  virtual ~Work() = default;
  // Advances the collective without blocking; true once it has completed on this rank.
  virtual bool is_completed() = 0;
  // Blocks until completed; throws hg::Error on a mismatch across ranks or after the timeout.
  virtual void wait() = 0;
};

namespace detail {
struct GroupState;  // distributed/backend.h
}  // namespace detail

class ProcessGroup {
 public:
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;  // this process's index among the ranks on its machine (pick a GPU with it)
  int local_size() const;  // ranks on this machine (share its cores between them)
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);

  // In place on every rank: f32, f64, f16, bf16, i32, i64 tensors, contiguous or not (copied in
  // and out). f16/bf16 are reduced in f32 and rounded once at the end (MPI has no 16-bit types;
  // NCCL does, but summing many 16-bit values in 16 bits loses them).
  void all_reduce(const Tensor& tensor, AllReduceOptions options = {});
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, AllReduceOptions options = {});
  // Every rank receives root's values (in place; same shape and dtype everywhere).
  void broadcast(const Tensor& tensor, int root = 0);
  // world_size tensors shaped like `tensor`, element r holding rank r's.
  std::vector<Tensor> all_gather(const Tensor& tensor);
  // Returns once every rank has called it.
  void barrier();

  // Set after a timeout or a transport failure: every collective then throws this message.
  bool is_broken() const;
  // Ends every rank of the job at once (MPI_Abort); mpirun exits with `code`.
  [[noreturn]] void abort(int code = 1);


 private:
  std::shared_ptr<detail::GroupState> state_;
};

// Joins the job the launcher started (MPI_Init on the first call; mpirun's environment gives rank
// and world size). Without mpirun the process is a world of one. Throws hg::Error when halfgrad
// was built without distributed support (configure with -DHG_DISTRIBUTED=ON, MPI installed).
std::shared_ptr<ProcessGroup> init(InitOptions options = {});

// Whether this build has MPI (init() works) and NCCL (CUDA tensors can be reduced).
bool is_available();
bool nccl_available();
// The world size a launcher announced in the environment (Open MPI's OMPI_COMM_WORLD_SIZE, or
// PMI_SIZE of MPICH-style launchers), 1 when there is none: lets a program decide whether to call
// init() without initialising MPI first.
int launched_world_size();

}  // namespace hg::distributed
