// hg::distributed::ProcessGroup on 2 MPI ranks (run by CTest through mpi_launch.sh): every
// collective on every dtype, contiguous or not, synchronous and asynchronous, and the errors a
// mismatch across ranks gives (on every rank alike, leaving the group usable).
#include <chrono>

#include "test_support.h"

using hg::Tensor;
namespace dist = hg::distributed;

namespace {

// One group for the whole test program (MPI starts once per process).
dist::ProcessGroup& group() {
  static const std::shared_ptr<dist::ProcessGroup> pg = dist::init({.timeout = std::chrono::seconds(60)});
  return *pg;
}

// [0, 1, ..., n-1] + offset, in `dtype`.
Tensor ramp(int64_t n, double offset, hg::DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i) + offset;
  return hg::from_vector(v, {n}, {.dtype = dtype});
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("distributed.world_of_two_on_one_machine") {
  dist::ProcessGroup& pg = group();
  CHECK(dist::is_available());
  CHECK(pg.world_size() == 2);
  CHECK((pg.rank() == 0 || pg.rank() == 1));
  CHECK(pg.local_size() == 2);  // loopback: both ranks share this machine
  CHECK(pg.local_rank() == pg.rank());
  CHECK(dist::launched_world_size() == 2);
  CHECK_FALSE(pg.is_broken());
}

TEST_CASE("distributed.all_reduce_every_dtype_and_op") {
  dist::ProcessGroup& pg = group();
  const double r = pg.rank();
  for (hg::DType dtype : {hg::f32, hg::f64, hg::f16, hg::bf16, hg::i32, hg::i64}) {
    CAPTURE(dtype);
    // Rank r holds i + 10r: the sum is 2i + 10, the max i + 10, the min i.
    Tensor sum = ramp(6, 10 * r, dtype), max = ramp(6, 10 * r, dtype), min = ramp(6, 10 * r, dtype);
    pg.all_reduce(sum);
    pg.all_reduce(max, {.op = dist::ReduceOp::Max});
    pg.all_reduce(min, {.op = dist::ReduceOp::Min});
    CHECK(sum.dtype() == dtype);
    CHECK(values(sum) == values(ramp(6, 0, hg::f64) * 2.0 + 10.0));
    CHECK(values(max) == values(ramp(6, 10, hg::f64)));
    CHECK(values(min) == values(ramp(6, 0, hg::f64)));
    if (hg::is_floating(dtype)) {
      Tensor mean = ramp(6, 10 * r, dtype);
      pg.all_reduce(mean, {.average = true});
      CHECK(values(mean) == values(ramp(6, 5, hg::f64)));
    } else {
      CHECK_THROWS_HG(pg.all_reduce(sum, {.average = true}), "average needs op Sum and a floating tensor");
    }
  }
}

TEST_CASE("distributed.non_contiguous_tensors_are_copied_in_and_out") {
  dist::ProcessGroup& pg = group();
  // A transposed view and a column of a larger tensor: the collective sees their values and
  // writes back through the view, leaving the rest of the storage alone.
  for (hg::DType dtype : {hg::f32, hg::bf16}) {
    CAPTURE(dtype);
    Tensor base = ramp(12, 0, dtype).reshape({3, 4});
    Tensor view = base.t();  // (4, 3), not contiguous
    REQUIRE_FALSE(view.is_contiguous());
    pg.all_reduce(view);
    CHECK(values(base) == values(ramp(12, 0, hg::f64) * 2.0));

    Tensor wide = ramp(12, 100 * double(pg.rank()), dtype).reshape({3, 4});
    Tensor column = hg::narrow(wide, 1, 2, 1);  // (3, 1), stride 4
    pg.broadcast(column, 1);
    const std::vector<double> w = values(wide);
    for (int64_t i = 0; i < 3; ++i) {
      CHECK(w[size_t(i * 4 + 2)] == double(i * 4 + 2) + 100);  // rank 1's column
      CHECK(w[size_t(i * 4 + 1)] == double(i * 4 + 1) + 100 * pg.rank());  // untouched
    }
  }
}

TEST_CASE("distributed.broadcast_and_all_gather") {
  dist::ProcessGroup& pg = group();
  for (hg::DType dtype : {hg::f32, hg::f64, hg::f16, hg::bf16, hg::i64, hg::u8}) {
    CAPTURE(dtype);
    Tensor t = ramp(5, 7 * pg.rank(), dtype);
    pg.broadcast(t, 0);
    CHECK(values(t) == values(ramp(5, 0, hg::f64)));
    const std::vector<Tensor> all = pg.all_gather(ramp(6, 20 * pg.rank(), dtype).reshape({2, 3}));
    REQUIRE(all.size() == 2);
    for (int r = 0; r < 2; ++r) {
      CHECK(all[size_t(r)].shape() == hg::Shape{2, 3});
      CHECK(all[size_t(r)].dtype() == dtype);
      CHECK(values(all[size_t(r)]) == values(ramp(6, 20 * r, hg::f64)));
    }
  }
  // bf16 bits travel unchanged (a broadcast is a copy, not arithmetic).
  Tensor odd = hg::from_vector(std::vector<float>{1.0f / 3.0f, -0.0f, 65280.0f}, {3}, {.dtype = hg::bf16});
  if (pg.rank() == 1) odd.zero_();
  pg.broadcast(odd, 0);
  CHECK(odd.to_vector<float>() == hg::from_vector(std::vector<float>{1.0f / 3.0f, -0.0f, 65280.0f}, {3}, {.dtype = hg::bf16}).to_vector<float>());
  // A zero-size tensor and a barrier go through too.
  Tensor empty = hg::zeros({0, 3});
  pg.all_reduce(empty);
  pg.barrier();
}

TEST_CASE("distributed.async_collectives_complete_in_any_polling_order") {
  dist::ProcessGroup& pg = group();
  // Started in one order, waited in the other: each payload still meets its peer, because a
  // payload starts only after every older collective's (the header queue keeps MPI's order).
  Tensor a = hg::full({1000}, 1.0 + pg.rank()), b = hg::full({10}, 10.0 * (1 + pg.rank()), {.dtype = hg::f64});
  auto work_a = pg.all_reduce_async(a, {.average = true});
  auto work_b = pg.all_reduce_async(b);
  work_b->wait();
  while (!work_a->is_completed()) {
  }
  CHECK(work_a->is_completed());
  CHECK(a.to_vector<float>() == std::vector<float>(1000, 1.5f));
  CHECK(b.to_vector<double>() == std::vector<double>(10, 30.0));
  // A handle dropped at once: the collective still completes (the next wait drives it, and the
  // last handle's destructor waits for its data) before its tensor is read.
  Tensor c = hg::full({5}, 1.0 + pg.rank(), {.dtype = hg::i64});
  pg.all_reduce_async(c);
  pg.barrier();
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>(5, 3));
}

TEST_CASE("distributed.mismatched_shapes_are_an_error_on_every_rank_not_corrupted_memory") {
  dist::ProcessGroup& pg = group();
  // Rank 1 passes 5 rows where rank 0 passes 4: both ranks throw, naming both calls; no data moved.
  Tensor t = hg::full({4 + pg.rank(), 3}, 1.0 + pg.rank());
  try {
    pg.all_reduce(t);
    FAIL("no error");
  } catch (const hg::Error& e) {
    const std::string message = e.what();
    CHECK(message.find("the ranks called different collectives or passed different tensors") != std::string::npos);
    CHECK(message.find("rank 0: all_reduce #") != std::string::npos);
    CHECK(message.find("of f32 [4, 3] on cpu (sum)") != std::string::npos);
    CHECK(message.find("of f32 [5, 3] on cpu (sum)") != std::string::npos);
    CHECK(message.find("still usable") != std::string::npos);
  }
  CHECK(t.to_vector<float>() == std::vector<float>(size_t((4 + pg.rank()) * 3), 1.0f + float(pg.rank())));
  // A different dtype, and a different collective, likewise.
  CHECK_THROWS_HG(pg.all_reduce(hg::ones({3}, {.dtype = pg.rank() == 0 ? hg::f32 : hg::f64})), "of f64 [3]");
  CHECK_THROWS_HG(pg.rank() == 0 ? pg.barrier() : pg.all_reduce(hg::ones({2})), "rank 1: all_reduce #");
  CHECK_THROWS_HG(pg.broadcast(hg::ones({2}), pg.rank()), "(root 1)");  // different roots
  // The group is still usable.
  CHECK_FALSE(pg.is_broken());
  Tensor ok = hg::full({2}, 1.0);
  pg.all_reduce(ok);
  CHECK(ok.to_vector<float>() == std::vector<float>{2.0f, 2.0f});
  // Local argument errors throw before anything is exchanged.
  CHECK_THROWS_HG(pg.broadcast(ok, 5), "root 5 outside the world of 2 ranks");
  CHECK_THROWS_HG(pg.all_reduce(Tensor()), "undefined tensor");
}

TEST_CASE("distributed.cuda_tensors_need_nccl" * doctest::skip(!hg_test::cuda_available())) {
  dist::ProcessGroup& pg = group();
  // One GPU per rank: with fewer GPUs than ranks on this machine, NCCL cannot run (it refuses a
  // GPU shared by two ranks of a communicator).
  if (hg::cuda::device_count() < pg.local_size()) return;
  const hg::Device device = hg::Device::cuda(pg.local_rank());
  if (!dist::nccl_available()) {
    CHECK_THROWS_HG(pg.all_reduce(hg::ones({4}, {.device = device})), "needs NCCL");
    return;
  }
  Tensor t = hg::full({4}, 1.0 + pg.rank(), {.dtype = hg::f16, .device = device});
  pg.all_reduce(t, {.average = true});
  CHECK(t.to_vector<float>() == std::vector<float>(4, 1.5f));
  Tensor flag = hg::full({}, double(pg.rank()), {.device = device});
  pg.all_reduce(flag, {.op = dist::ReduceOp::Max});
  CHECK(flag.item<float>() == 1.0f);
}

// Issue 25, item 4: settings the ranks must share are compared through one collective, and a
// difference is the same hg::Error on every rank, naming the setting, the rank and both values.
TEST_CASE("distributed.require_same_settings_names_what_differs_on_every_rank") {
  dist::ProcessGroup& pg = group();
  const std::string rank = std::to_string(pg.rank());
  dist::require_same_settings(pg, {{"--seed", "1"}, {"--lr", "0.05"}});  // agreeing ranks pass
  CHECK_THROWS_HG(dist::require_same_settings(pg, {{"--seed", "1"}, {"--lr", rank == "0" ? "0.05" : "0.1"}}),
                  "the ranks disagree on --lr: rank 1 has \"0.1\", rank 0 has \"0.05\"");
  // A list (a model's parameters): the first item that differs is named.
  hg::manual_seed(0);
  hg::nn::Sequential mine = pg.rank() == 0 ? hg::nn::Sequential(hg::nn::Linear(4, 8), hg::nn::Linear(8, 2))
                                           : hg::nn::Sequential(hg::nn::Linear(4, 8), hg::nn::Linear(8, 3));
  CHECK_THROWS_HG(dist::require_same_settings(pg, {{"model", dist::structure_of(mine)}}),
                  "the ranks disagree on model: item 2 differs: rank 1 has \"parameter 1.weight [3, 8] f32\", rank 0 has "
                  "\"parameter 1.weight [2, 8] f32\"");
  // Other names (another program) are refused as such.
  CHECK_THROWS_HG(dist::require_same_settings(pg, {{rank == "0" ? "--seed" : "--sed", "1"}}),
                  "rank 1 runs another program or version");
  CHECK_FALSE(pg.is_broken());  // the group stays usable
  dist::require_same_settings(pg, {});
}
