// Failure scenarios, one per CTest test (tests/distributed/CMakeLists.txt), each on 2 ranks:
//   rank_exits_mid_step    rank 1 dies (std::_Exit) in the middle of a DataParallel backward
//   rank_throws_mid_step   rank 1's step throws; it catches the error and leaves the loop
//   late_rank              rank 1 reaches a barrier 3 s late, past rank 0's 1 s timeout
// Rank 0 must get an hg::Error that names the collective, its rank and the timeout, no sooner
// than the timeout and not much later; it then prints FAULT_TEST_PASSED (which CTest looks for)
// and ends the job with ProcessGroup::abort, as a program should once its group is broken.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "halfgrad.h"

namespace dist = hg::distributed;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTimeout = std::chrono::seconds(2);

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Rank 0's verdict on the error it caught after `elapsed` seconds; ends the job.
[[noreturn]] void judge(dist::ProcessGroup& pg, const std::string& message, double elapsed, double timeout_s,
                        const char* collective, const char* timeout_text) {
  const bool named = contains(message, collective) && contains(message, "on rank 0 of 2") &&
                     contains(message, std::string("timed out after ") + timeout_text);
  const bool in_time = elapsed >= timeout_s * 0.9 && elapsed <= timeout_s + 5.0;  // slack for a busy machine
  bool broken_after = false;
  try {
    pg.barrier();
  } catch (const hg::Error& e) {
    broken_after = contains(e.what(), "unusable after an earlier failure");
  }
  std::printf("rank 0 caught after %.2f s: %s\n", elapsed, message.c_str());
  std::printf("%s (names the collective, rank and timeout: %s; within the timeout: %s; group unusable after: %s)\n",
              named && in_time && broken_after ? "FAULT_TEST_PASSED" : "FAULT_TEST_FAILED", named ? "yes" : "no",
              in_time ? "yes" : "no", broken_after ? "yes" : "no");
  std::fflush(stdout);
  pg.abort(named && in_time && broken_after ? 0 : 1);
}

// A small DataParallel MLP step on random data; `on_rank_1` runs on rank 1 at step 2, from a hook
// on the first layer's weight (reached late in backward, after other buckets started).
int train_until_failure(dist::ProcessGroup& pg, std::shared_ptr<dist::ProcessGroup> shared, const std::string& mode) {
  using namespace hg::nn;
  hg::manual_seed(3);
  Sequential model{Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10)};
  dist::DataParallel ddp(model, shared, {.bucket_cap_mb = 0.1});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  int step = 0;
  if (mode == "rank_exits_mid_step" && pg.rank() == 1) {
    model.parameters()[0].register_post_accumulate_grad_hook([&step](const hg::Tensor&) {
      if (step == 2) std::_Exit(3);  // a crash: no destructor, no MPI_Finalize
    });
  }
  for (step = 0; step < 5; ++step) {
    const hg::Tensor x = hg::randn({32, 784});
    const hg::Tensor y = hg::randint(0, 10, {32}, {.dtype = hg::i64});
    opt.zero_grad();
    const auto start = Clock::now();
    try {
      hg::Tensor loss = hg::cross_entropy(ddp(x), y);
      if (mode == "rank_throws_mid_step" && pg.rank() == 1 && step == 2) throw hg::Error("simulated failure on rank 1");
      loss.backward();
      opt.step();
    } catch (const hg::Error& e) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (pg.rank() == 0) judge(pg, e.what(), elapsed, 2.0, "all_reduce #", "2 s");
      // Rank 1 (the one that threw): leaves like a program that caught an error. Its exit waits
      // in MPI_Finalize until rank 0's abort ends the job.
      std::printf("rank 1 threw and leaves: %s\n", e.what());
      std::fflush(stdout);
      return 1;
    }
  }
  std::printf("FAULT_TEST_FAILED: rank %d finished every step without an error\n", pg.rank());
  return 1;
}

int late_rank(dist::ProcessGroup& pg) {
  pg.set_timeout(std::chrono::seconds(1));
  pg.barrier();  // both arrive
  if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto start = Clock::now();
  try {
    pg.barrier();
  } catch (const hg::Error& e) {
    if (pg.rank() == 0) judge(pg, e.what(), std::chrono::duration<double>(Clock::now() - start).count(), 1.0, "barrier #", "1 s");
  }
  std::printf("FAULT_TEST_FAILED: rank %d passed the barrier\n", pg.rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "rank_exits_mid_step" && mode != "rank_throws_mid_step" && mode != "late_rank") {
    std::fprintf(stderr, "usage: %s rank_exits_mid_step|rank_throws_mid_step|late_rank (under mpirun -np 2)\n", argv[0]);
    return 2;
  }
  hg::set_num_threads(1);
  std::shared_ptr<dist::ProcessGroup> pg = dist::init({.timeout = kTimeout});
  if (pg->world_size() != 2) {
    std::printf("FAULT_TEST_FAILED: needs 2 ranks, got %d\n", pg->world_size());
    return 1;
  }
  return mode == "late_rank" ? late_rank(*pg) : train_until_failure(*pg, pg, mode);
}
