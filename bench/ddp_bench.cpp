// ddp_bench: data-parallel training speed of hg-train's MLP and CNN at a fixed global batch, one
// thread per rank. Run it on 2 ranks:
//
//   mpirun -np 2 build/bench/ddp_bench [--steps 40] [--global-batch 128] [--repeats 3]
//
// Rows per model:
//   1 rank            rank 0 trains alone on the global batch (rank 1 sleeps in a barrier)
//   2 ranks, no sync  both ranks train on half the batch with no communication at all: the
//                     ceiling this machine allows two processes (memory bandwidth, other load)
//   2 ranks, 1 bucket DataParallel, half the batch each, one 25 MiB bucket (the default): the
//                     all-reduce starts when backward is over
//   2 ranks, N buckets small buckets: the later layers' all-reduces start while backward is still
//                     busy with the earlier ones
// Columns: samples/s and speedup over 1 rank; the time per step each rank spent blocked at the
// end of backward waiting for all-reduces (and its share of the step); the time the same
// all-reduce takes on its own (no compute beside it); and the overlap: the share of the gradient
// bytes whose all-reduce had already finished when backward did. The wait also holds any
// imbalance between the ranks (one ran slower this step): on a shared machine read it together
// with the load average printed above the table and the "no sync" row. Each row is the fastest
// of --repeats runs (another program's burst slows a run; it never speeds one up).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "halfgrad.h"
#include "train/models.h"

namespace dist = hg::distributed;
using Clock = std::chrono::steady_clock;

namespace {

struct Measurement {
  double step_s = 0;       // per step, the slower rank's
  double wait_s = 0;       // per step, blocked waiting for all-reduces (mean over ranks)
  double overlapped = 0;   // share of the gradient bytes all-reduced before backward ended (mean over ranks)
  int64_t buckets = 0;
};

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The slowest rank's value.
double max_over_ranks(dist::ProcessGroup& pg, double value) {
  const hg::Tensor t = hg::full({}, value, {.dtype = hg::f64});
  pg.all_reduce(t, {.op = dist::ReduceOp::Max});
  return t.item<double>();
}

// `steps` SGD steps of `model_name` on random Fashion-MNIST-shaped data with `batch` samples per
// step; through DataParallel when `ddp_options` is set.
Measurement train(dist::ProcessGroup& pg, const std::shared_ptr<dist::ProcessGroup>& shared, const std::string& model_name,
                  int64_t batch, int steps, const dist::DataParallelOptions* ddp_options) {
  hg::manual_seed(uint64_t(pg.rank()) + 1);
  hg::nn::Sequential model = hg_train::make_model(model_name);
  std::unique_ptr<dist::DataParallel> ddp;
  if (ddp_options) ddp = std::make_unique<dist::DataParallel>(model, shared, *ddp_options);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const hg::Tensor x = hg::rand({batch, 1, 28, 28});
  const hg::Tensor y = hg::randint(0, 10, {batch}, {.dtype = hg::i64});
  const auto step = [&] {
    opt.zero_grad();
    hg::cross_entropy(ddp ? (*ddp)(x) : model(x), y).backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator, caches
  if (ddp) ddp->reset_sync_stats();
  if (ddp) pg.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  Measurement m;
  m.step_s = seconds_since(start) / steps;
  if (ddp) {
    m.step_s = max_over_ranks(pg, m.step_s);
    const hg::Tensor wait = hg::full({}, ddp->sync_stats().wait_seconds / steps, {.dtype = hg::f64});
    pg.all_reduce(wait, {.average = true});
    m.wait_s = wait.item<double>();
    const dist::SyncStats& stats = ddp->sync_stats();
    const hg::Tensor overlapped = hg::full({}, double(stats.bytes_overlapped) / double(stats.bytes * stats.syncs), {.dtype = hg::f64});
    pg.all_reduce(overlapped, {.average = true});
    m.overlapped = overlapped.item<double>();
    m.buckets = int64_t(ddp->bucket_names().size());
  }
  return m;
}

// The time one all-reduce (average) of `bytes` of f32 gradients takes with nothing else running.
double all_reduce_alone(dist::ProcessGroup& pg, int64_t bytes) {
  const hg::Tensor buffer = hg::ones({bytes / 4});
  for (int i = 0; i < 5; ++i) pg.all_reduce(buffer, {.average = true});
  pg.barrier();
  const int reps = 50;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) pg.all_reduce(buffer, {.average = true});
  return max_over_ranks(pg, seconds_since(start) / reps);
}

// The fastest of `repeats` runs (every rank runs them all, so their collectives stay matched).
template <class Run>
Measurement best_of(int repeats, const Run& run) {
  Measurement best = run();
  for (int i = 1; i < repeats; ++i) {
    const Measurement m = run();
    if (m.step_s < best.step_s) best = m;
  }
  return best;
}

int64_t gradient_bytes(const std::string& model_name) {
  int64_t n = 0;
  for (const hg::Tensor& p : hg_train::make_model(model_name).parameters()) n += p.numel();
  return n * 4;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, repeats = 3;
  int64_t global_batch = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--global-batch")) global_batch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::max(1, std::atoi(argv[i + 1]));
  }
  if (!dist::is_available()) {
    std::printf("ddp_bench: this halfgrad was built without distributed support (no MPI); nothing to measure\n");
    return 0;
  }
  try {
    hg::set_num_threads(1);
    const std::shared_ptr<dist::ProcessGroup> shared = dist::init();
    dist::ProcessGroup& pg = *shared;
    const int world = pg.world_size();
    const bool speaker = pg.rank() == 0;
    if (speaker) {
      std::printf("ddp_bench: %d rank(s) x 1 thread, global batch %lld, %d timed steps after 3 warm-up steps, best of %d\n",
                  world, (long long)global_batch, steps, repeats);
      std::printf("load average before: %s (%d cores on this machine)\n", load_average().c_str(),
                  int(std::thread::hardware_concurrency()));
      if (world != 2) std::printf("(run under mpirun -np 2 for the 2-rank rows)\n");
      std::printf("\n| model | ranks | buckets | step ms | samples/s | vs 1 rank | all-reduce wait ms/step (share) | "
                  "all-reduce alone ms | all-reduced during backward |\n|---|---|---|---|---|---|---|---|---|\n");
    }
    std::vector<std::string> notes;
    for (const std::string model : {"mlp", "cnn"}) {
      // 1 rank: rank 0 alone; the others wait (sleeping between polls) in the barrier.
      Measurement single;
      if (speaker) single = best_of(repeats, [&] { return train(pg, shared, model, global_batch, steps, nullptr); });
      pg.barrier();
      single.step_s = max_over_ranks(pg, single.step_s);
      if (speaker)
        std::printf("| %s | 1 | - | %.1f | %.0f | 1.00x | - | - | - |\n", model.c_str(), 1e3 * single.step_s,
                    double(global_batch) / single.step_s);
      if (world < 2) continue;
      const int64_t bytes = gradient_bytes(model);
      const double alone = all_reduce_alone(pg, bytes);
      // Two processes computing side by side, never talking: the speedup's ceiling here.
      Measurement apart = best_of(repeats, [&] { return train(pg, shared, model, global_batch / world, steps, nullptr); });
      apart.step_s = max_over_ranks(pg, apart.step_s);
      if (speaker)
        std::printf("| %s | %d, no sync | - | %.1f | %.0f | %.2fx | - | - | - |\n", model.c_str(), world, 1e3 * apart.step_s,
                    double(global_batch) / apart.step_s, single.step_s / apart.step_s);
      for (double cap_mb : {25.0, model == "mlp" ? 0.25 : 0.02}) {
        const dist::DataParallelOptions options{.bucket_cap_mb = cap_mb};
        const Measurement m =
            best_of(repeats, [&] { return train(pg, shared, model, global_batch / world, steps, &options); });
        if (speaker)
          std::printf("| %s | %d | %lld | %.1f | %.0f | %.2fx | %.2f (%.1f%%) | %.2f | %s |\n", model.c_str(), world,
                      (long long)m.buckets, 1e3 * m.step_s, double(global_batch) / m.step_s, single.step_s / m.step_s,
                      1e3 * m.wait_s, 100 * m.wait_s / m.step_s, 1e3 * alone, (std::to_string(int(100 * m.overlapped)) + "%").c_str());
      }
      notes.push_back(model + ": " + std::to_string(bytes) + " gradient bytes all-reduced per rank per step (f32)");
    }
    if (speaker) {
      std::printf("\n");
      for (const std::string& note : notes) std::printf("%s\n", note.c_str());
      std::printf("load average after: %s\n", load_average().c_str());
    }
    return 0;
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
    return 1;
  }
}
