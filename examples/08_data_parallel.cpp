// Lesson 8: data-parallel training -- two processes, one model, averaged gradients.
//
//   mpirun -np 2 build/examples/08_data_parallel        (as root: add --allow-run-as-root)
//
// Each process (a "rank") holds a full copy of the model and sees half of every batch. After
// backward each rank has the gradient of *its* half; an all-reduce replaces both by their
// average, which is the gradient of the whole batch (a mean over 128 samples is the mean of two
// means over 64). The same optimizer step on the same gradient keeps the two copies identical,
// so two processes train one model on twice the data per step.
//
//   1. the gradients before and after the all-reduce, next to the one-process gradient;
//   2. 20 steps of DataParallel against one process on the double batch: the losses agree, and
//      the two ranks hold bitwise the same parameters;
//   3. measured: time per step for 1 rank x 128 and 2 ranks x 64, and the time spent waiting
//      for the all-reduce.
// Without mpirun the world has one rank and the lesson says so.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "halfgrad.h"

namespace dist = hg::distributed;

namespace {

constexpr int64_t kBatch = 128, kFeatures = 64, kClasses = 10;

hg::nn::Sequential make_model() {
  hg::manual_seed(8);
  return hg::nn::Sequential{hg::nn::Linear(kFeatures, 128), hg::nn::ReLU(), hg::nn::Linear(128, kClasses)};
}

// Batch `step` of a synthetic data set, the same on every rank: Gaussian inputs, labels from a
// fixed random linear teacher.
struct Batch {
  hg::Tensor x, y;  // (N, 64) f32, (N) i64
};
Batch global_batch(int step) {
  hg::manual_seed(99);
  const hg::Tensor teacher = hg::randn({kFeatures, kClasses});
  hg::manual_seed(1000 + uint64_t(step));
  const hg::Tensor x = hg::randn({kBatch, kFeatures});
  return {x, hg::argmax(hg::matmul(x, teacher), 1)};
}
// Rank r of n takes rows r, r + n, r + 2n, ... (DistributedSampler's rule).
Batch shard(const Batch& b, int rank, int world) {
  const int64_t local = kBatch / world;
  return {hg::as_strided(b.x, {local, kFeatures}, {world * kFeatures, 1}, rank * kFeatures).contiguous(),
          hg::as_strided(b.y, {local}, {world}, rank).contiguous()};
}

double max_abs_difference(const hg::Tensor& a, const hg::Tensor& b) {
  return hg::amax(hg::abs(a - b).flatten(), 0).item<double>();
}

// Part 1: one backward on each rank's half, the all-reduce, and the one-process gradient.
bool show_the_all_reduce(dist::ProcessGroup& pg) {
  const Batch b = global_batch(0);
  hg::nn::Sequential model = make_model();
  const Batch mine = shard(b, pg.rank(), pg.world_size());
  hg::cross_entropy(model(mine.x), mine.y).backward();
  const hg::Tensor own = model.parameters()[3].grad().clone();  // the last layer's bias gradient
  const std::vector<hg::Tensor> before = pg.all_gather(own);  // every rank's, to print them
  pg.all_reduce(model.parameters()[3].grad(), {.average = true});  // what DataParallel does to each gradient
  const hg::Tensor after = model.parameters()[3].grad();

  hg::nn::Sequential alone = make_model();  // one process, the whole batch
  hg::cross_entropy(alone(b.x), b.y).backward();
  const hg::Tensor full = alone.parameters()[3].grad();
  const double difference = max_abs_difference(after, full);
  if (pg.rank() == 0) {
    std::printf("1. the last layer's bias gradient (first 4 of %lld entries)\n", (long long)kClasses);
    for (int r = 0; r < pg.world_size(); ++r) {
      const std::vector<float> g = before[size_t(r)].to_vector<float>();
      std::printf("   rank %d, its %lld samples:      % .6f % .6f % .6f % .6f\n", r, (long long)(kBatch / pg.world_size()),
                  g[0], g[1], g[2], g[3]);
    }
    const std::vector<float> a = after.to_vector<float>(), f = full.to_vector<float>();
    std::printf("   after the all-reduce (average): % .6f % .6f % .6f % .6f   (on every rank)\n", a[0], a[1], a[2], a[3]);
    std::printf("   one process, all %lld samples:  % .6f % .6f % .6f % .6f\n", (long long)kBatch, f[0], f[1], f[2], f[3]);
    std::printf("   largest difference: %.2g (rounding: the sums ran in another order)\n\n", difference);
  }
  return difference < 1e-6;
}

// Parts 2 and 3: DataParallel against one process, and what it cost.
bool train_and_time(dist::ProcessGroup& pg, const std::shared_ptr<dist::ProcessGroup>& shared) {
  constexpr int kSteps = 20;
  hg::nn::Sequential model = make_model(), alone = make_model();
  dist::DataParallel ddp(model, shared);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  hg::optim::SGD opt_alone(alone.parameters(), {.lr = 0.1, .momentum = 0.9});
  double worst = 0, ddp_seconds = 0, alone_seconds = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = global_batch(step);
    const Batch mine = shard(b, pg.rank(), pg.world_size());
    pg.barrier();  // time the step from a common start
    auto start = std::chrono::steady_clock::now();
    opt.zero_grad();
    const hg::Tensor loss = hg::cross_entropy(ddp(mine.x), mine.y);
    loss.backward();
    opt.step();
    ddp_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    start = std::chrono::steady_clock::now();
    opt_alone.zero_grad();
    const hg::Tensor loss_alone = hg::cross_entropy(alone(b.x), b.y);
    loss_alone.backward();
    opt_alone.step();
    alone_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // The loss of the whole batch is the average of the ranks' losses.
    const hg::Tensor mean_loss = loss.detach().clone();
    pg.all_reduce(mean_loss, {.average = true});
    worst = std::max(worst, std::abs(mean_loss.item<double>() - loss_alone.item<double>()));
    if (pg.rank() == 0 && (step % 5 == 0 || step == kSteps - 1))
      std::printf("   step %2d  loss: 2 ranks %.6f   1 process %.6f\n", step, mean_loss.item<double>(), loss_alone.item<double>());
  }
  // Every rank must hold bitwise the same parameters: compare them through an all-gather.
  bool identical = true;
  for (const hg::Tensor& p : model.parameters()) {
    const std::vector<hg::Tensor> all = pg.all_gather(p);
    for (const hg::Tensor& other : all) identical = identical && other.to_vector<float>() == all[0].to_vector<float>();
  }
  const dist::SyncStats stats = ddp.sync_stats();
  if (pg.rank() == 0) {
    std::printf("   largest loss difference over %d steps: %.2g; parameters identical on every rank: %s\n\n", kSteps, worst,
                identical ? "yes" : "NO");
    std::printf("3. time per step (this machine, %d thread(s) per rank; the ranks share its cores)\n", hg::get_num_threads());
    std::printf("   1 process  x %3lld samples: %6.2f ms\n", (long long)kBatch, 1e3 * alone_seconds / kSteps);
    std::printf("   %d ranks    x %3lld samples: %6.2f ms, of which %.2f ms waiting for the all-reduce of %lld bytes\n",
                pg.world_size(), (long long)(kBatch / pg.world_size()), 1e3 * ddp_seconds / kSteps,
                1e3 * stats.wait_seconds / double(stats.syncs), (long long)stats.bytes);
    std::printf("   A model this small computes for well under a millisecond, so the all-reduce's fixed cost\n"
                "   (a round trip between the processes) is a large part of its step: data parallelism pays off when\n"
                "   a step computes for much longer than its gradients take to travel (bench/ddp_bench: hg-train's CNN).\n");
  }
  return worst < 1e-5 && identical;
}

}  // namespace

int main() {
  if (!dist::is_available()) {
    std::printf("08_data_parallel: this halfgrad was built without distributed support (install libopenmpi-dev "
                "openmpi-bin and rebuild); nothing to show\n");
    return 0;
  }
  try {
    hg::set_num_threads(1);
    const std::shared_ptr<dist::ProcessGroup> shared = dist::init();
    dist::ProcessGroup& pg = *shared;
    if (pg.rank() == 0) {
      std::printf("08_data_parallel: %d rank(s)%s\n\n", pg.world_size(),
                  pg.world_size() == 1 ? " (start it with mpirun -np 2 to see two processes)" : "");
    }
    bool ok = show_the_all_reduce(pg);
    if (pg.rank() == 0) std::printf("2. 20 steps of SGD: DataParallel on %d ranks vs one process on the whole batch\n", pg.world_size());
    ok = train_and_time(pg, shared) && ok;
    if (pg.rank() == 0) std::printf("%s\n", ok ? "data_parallel: all checks passed" : "data_parallel: CHECK FAILED");
    return ok ? 0 : 1;
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "08_data_parallel: %s\n", e.what());
    return 1;
  }
}
