// hg::distributed in one plain process (no mpirun): a world of one, where every collective is the
// identity and DataParallel trains exactly like the bare model; and, in a build without MPI, the
// error that says so. The 2-rank tests live in tests/distributed/ (run under mpirun).
#include <chrono>

#include "test_support.h"

using hg::Tensor;
namespace dist = hg::distributed;

namespace {

const bool kWithMpi = dist::is_available();

std::shared_ptr<dist::ProcessGroup> group() {
  static const std::shared_ptr<dist::ProcessGroup> pg = dist::init({.timeout = std::chrono::seconds(60)});
  return pg;
}

}  // namespace

TEST_CASE("distributed.local.without_mpi_init_explains" * doctest::skip(kWithMpi)) {
  CHECK_THROWS_HG(dist::init(), "built without distributed support");
  CHECK_FALSE(dist::nccl_available());
}

TEST_CASE("distributed.local.a_world_of_one" * doctest::skip(!kWithMpi)) {
  auto pg = group();
  CHECK(pg->world_size() == 1);
  CHECK(pg->rank() == 0);
  CHECK(pg->local_size() == 1);
  Tensor t = hg::from_vector(std::vector<float>{1.5f, -2.0f}, {2});
  pg->all_reduce(t, {.average = true});
  pg->broadcast(t, 0);
  pg->barrier();
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  const std::vector<Tensor> all = pg->all_gather(t);
  REQUIRE(all.size() == 1);
  CHECK(all[0].to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK_THROWS_HG(pg->broadcast(t, 1), "root 1 outside the world of 1 ranks");
  pg->set_timeout(std::chrono::milliseconds(1500));
  CHECK(pg->timeout() == std::chrono::milliseconds(1500));
  CHECK_THROWS_HG(pg->set_timeout(std::chrono::milliseconds(0)), "positive");
}

TEST_CASE("distributed.local.data_parallel_on_one_rank_is_the_bare_model" * doctest::skip(!kWithMpi)) {
  using namespace hg::nn;
  const auto train = [](bool wrap) {
    hg::manual_seed(1);
    Sequential model{Linear(6, 8), ReLU(), Linear(8, 3)};
    std::unique_ptr<dist::DataParallel> ddp;
    if (wrap) ddp = std::make_unique<dist::DataParallel>(model, group(), dist::DataParallelOptions{.bucket_cap_mb = 1e-4});
    hg::optim::Adam opt(model.parameters(), {.lr = 0.01});
    hg::amp::GradScaler scaler({.init_scale = 256.0});
    if (ddp) ddp->attach(scaler);
    for (int step = 0; step < 4; ++step) {
      const Tensor x = hg::randn({5, 6});
      const Tensor y = hg::randint(0, 3, {5}, {.dtype = hg::i64});
      opt.zero_grad();
      const Tensor loss = hg::cross_entropy(ddp ? (*ddp)(x) : model(x), y);
      scaler.scale(loss).backward();
      CHECK(scaler.step(opt).applied);
      scaler.update();
    }
    if (ddp) {
      CHECK(ddp->bucket_names().size() == 4);  // 1e-4 MiB: one tensor per bucket
      CHECK(ddp->sync_stats().syncs == 4);
      CHECK(ddp->sync_stats().bytes == (6 * 8 + 8 + 8 * 3 + 3) * 4);
    }
    return model.parameters();
  };
  const std::vector<Tensor> wrapped = train(true), bare = train(false);
  for (size_t i = 0; i < bare.size(); ++i) CHECK(wrapped[i].to_vector<float>() == bare[i].to_vector<float>());
}
