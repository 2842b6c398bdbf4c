// Checkpoint resume and determinism (docs/testing.md scenarios 24-25). A small MLP with dropout
// trains with SGD + momentum under f16 autocast and a GradScaler; a run interrupted after 10
// steps, saved (model + optimizer + scaler + data loader + RNG, one safetensors file through
// hg::save) and resumed into fresh objects gives losses bitwise identical to an uninterrupted
// run. Two runs with the same seed are bitwise identical; deterministic mode can be set and
// queried, and on CUDA the atomics-based embedding backward refuses to run under it.
#include <bit>
#include <filesystem>
#include <memory>

#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

using StateDict = std::map<std::string, Tensor>;

const bool kNoData = !std::filesystem::exists(hg::data::kFashionMnistRoot);

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(hg::element_size(c.dtype())));
}

// Loss values as their bit patterns: "bitwise identical" means exactly that (and NaN == NaN).
using Losses = std::vector<uint32_t>;

void merge(StateDict& into, const std::string& prefix, const StateDict& from) {
  for (const auto& [k, v] : from) into[prefix + k] = v;
}
StateDict extract(const StateDict& all, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : all)
    if (k.starts_with(prefix)) out[k.substr(prefix.size())] = v;
  return out;
}

// Everything a training run owns. The model's initialisation draws from the global RNG, so the
// seed is set before it is built.
struct Run {
  nn::Sequential model;
  hg::optim::SGD opt;
  hg::amp::GradScaler scaler;

  explicit Run(uint64_t seed, int64_t in_features)
      : model((hg::manual_seed(seed), nn::Sequential{nn::Flatten(), nn::Linear(in_features, 32), nn::ReLU(),
                                                     nn::Dropout(0.2), nn::Linear(32, 10)})),
        opt(model.parameters(), {.lr = 0.05, .momentum = 0.9}),
        scaler({.init_scale = 1024, .growth_interval = 3}) {}

  // One AMP training step; returns the loss's bits.
  uint32_t step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return std::bit_cast<uint32_t>(loss.item<float>());
  }

  void save(const std::string& path, const StateDict& extra = {}) {
    StateDict state = extra;
    merge(state, "model.", model.state_dict());
    merge(state, "optimizer.", opt.state_dict());
    merge(state, "scaler.", scaler.state_dict());
    const hg::random::GeneratorState rng = hg::random::get_state();
    state["rng.seed"] = hg::from_vector(std::vector<int64_t>{int64_t(rng.seed)}, {});
    state["rng.offset"] = hg::from_vector(std::vector<int64_t>{int64_t(rng.offset)}, {});
    hg::save(path, state);
  }

  // Loads everything but the RNG, which load_rng restores (separate, for the negative control).
  StateDict load(const std::string& path) {
    const StateDict state = hg::load(path);
    model.load_state_dict(extract(state, "model."));
    opt.load_state_dict(extract(state, "optimizer."));
    scaler.load_state_dict(extract(state, "scaler."));
    return state;
  }
  static void load_rng(const StateDict& state) {
    hg::random::set_state({uint64_t(state.at("rng.seed").item<int64_t>()), uint64_t(state.at("rng.offset").item<int64_t>())});
  }

  std::vector<std::vector<uint8_t>> param_bytes() const {
    std::vector<std::vector<uint8_t>> out;
    for (const Tensor& p : model.parameters()) out.push_back(bytes_of(p));
    return out;
  }
};

// ---- synthetic data (no dataset needed) ----

struct Synthetic {
  std::vector<Tensor> x, y;
  explicit Synthetic(int n) {
    hg::manual_seed(2024);
    for (int i = 0; i < n; ++i) {
      x.push_back(hg::randn({16, 20}));
      y.push_back(hg::randint(0, 10, {16}, {.dtype = hg::i64}));
    }
  }
};

Losses run_synthetic(Run& run, const Synthetic& data, int begin, int end) {
  Losses losses;
  for (int i = begin; i < end; ++i) losses.push_back(run.step(data.x[size_t(i)], data.y[size_t(i)]));
  return losses;
}

// ---- Fashion-MNIST through the real DataLoader ----

Losses run_loader(Run& run, hg::data::DataLoader& loader, int steps) {
  Losses losses;
  while (int(losses.size()) < steps) {
    for (auto [x, y] : loader) {
      if (int(losses.size()) == steps) break;  // this batch stays unconsumed (the loader's position)
      losses.push_back(run.step(x, y));
    }
  }
  return losses;
}

Losses tail(const Losses& v, size_t from) { return Losses(v.begin() + long(from), v.end()); }

}  // namespace

// ---- scenario 24: checkpoint resume -----------------------------------------------------------------

TEST_CASE("resume.fashion_mnist_next_10_steps_are_bitwise_identical" * doctest::skip(kNoData)) {
  const hg::data::MNIST subset = hg::data::FashionMNIST(hg::data::kFashionMnistRoot).head(512);
  REQUIRE(subset.size() == 512);
  const hg::data::DataLoaderOptions loader_options{.batch_size = 64, .shuffle = true, .seed = 3};  // 8 batches/epoch

  // Uninterrupted: 20 steps (crossing two epoch boundaries).
  Run full(7, 784);
  hg::data::DataLoader full_loader(subset, loader_options);
  const Losses expected = run_loader(full, full_loader, 20);
  const double final_scale = full.scaler.get_scale();
  const int64_t final_tracker = full.scaler.growth_tracker();

  // Interrupted after 10 steps (mid-epoch, mid growth interval), saved to one file.
  const std::string path = hg_test::temp_path("resume_fashion.safetensors");
  {
    Run first(7, 784);
    hg::data::DataLoader loader(subset, loader_options);
    const Losses head = run_loader(first, loader, 10);
    CHECK(head == Losses(expected.begin(), expected.begin() + 10));  // same seed, same first half
    CHECK(first.scaler.growth_tracker() != 0);                       // the scaler state matters
    StateDict loader_state;
    merge(loader_state, "loader.", loader.state_dict());
    first.save(path, loader_state);
  }

  // Fresh objects (another seed, a disturbed RNG), everything loaded, 10 more steps.
  Run resumed(99, 784);
  hg::data::DataLoader loader(subset, loader_options);
  hg::randn({1000});
  const StateDict state = resumed.load(path);
  loader.load_state_dict(extract(state, "loader."));
  Run::load_rng(state);
  const Losses rest = run_loader(resumed, loader, 10);
  CHECK(rest == tail(expected, 10));
  CHECK(resumed.param_bytes() == full.param_bytes());
  CHECK(resumed.scaler.get_scale() == final_scale);
  CHECK(resumed.scaler.growth_tracker() == final_tracker);

  // Negative controls: without the RNG state (dropout masks) or the loader position, the
  // resumed losses differ -- so both really are part of what the checkpoint must hold.
  {
    Run no_rng(99, 784);
    hg::data::DataLoader no_rng_loader(subset, loader_options);
    no_rng.load(path);
    no_rng_loader.load_state_dict(extract(state, "loader."));
    hg::manual_seed(12345);
    CHECK(run_loader(no_rng, no_rng_loader, 10) != tail(expected, 10));
  }
  {
    Run no_loader(99, 784);
    hg::data::DataLoader fresh_loader(subset, loader_options);
    Run::load_rng(no_loader.load(path));
    CHECK(run_loader(no_loader, fresh_loader, 10) != tail(expected, 10));
  }
}

TEST_CASE("resume.synthetic_model_optimizer_scaler_rng") {
  const Synthetic data(20);
  Run full(11, 20);
  const Losses expected = run_synthetic(full, data, 0, 20);

  const std::string path = hg_test::temp_path("resume_synthetic.safetensors");
  {
    Run first(11, 20);
    CHECK(run_synthetic(first, data, 0, 10) == Losses(expected.begin(), expected.begin() + 10));
    first.save(path);
  }
  Run resumed(5, 20);
  hg::rand({77});
  Run::load_rng(resumed.load(path));
  CHECK(run_synthetic(resumed, data, 10, 20) == tail(expected, 10));
  CHECK(resumed.param_bytes() == full.param_bytes());
  CHECK(resumed.scaler.get_scale() == full.scaler.get_scale());
  CHECK(resumed.scaler.growth_tracker() == full.scaler.growth_tracker());

  // Without the optimizer's momentum buffers the trajectory differs.
  Run no_momentum(5, 20);
  const StateDict state = hg::load(path);
  no_momentum.model.load_state_dict(extract(state, "model."));
  no_momentum.scaler.load_state_dict(extract(state, "scaler."));
  Run::load_rng(state);
  CHECK(run_synthetic(no_momentum, data, 10, 20) != tail(expected, 10));
}

// ---- scenario 25: determinism -------------------------------------------------------------------------

namespace {
// Turns deterministic mode on for a scope, restoring the previous setting even when a check throws.
struct DeterministicScope {
  bool previous = hg::are_deterministic_algorithms_enabled();
  explicit DeterministicScope(bool on) { hg::use_deterministic_algorithms(on); }
  ~DeterministicScope() { hg::use_deterministic_algorithms(previous); }
};
}  // namespace

TEST_CASE("determinism.same_seed_gives_bitwise_identical_runs") {
  const Synthetic data(12);
  for (const bool deterministic : {false, true}) {
    CAPTURE(deterministic);
    DeterministicScope mode(deterministic);
    Run a(31, 20), b(31, 20);
    hg::manual_seed(8);
    const Losses la = run_synthetic(a, data, 0, 12);
    hg::manual_seed(8);
    const Losses lb = run_synthetic(b, data, 0, 12);
    CHECK(la == lb);
    CHECK(a.param_bytes() == b.param_bytes());
    // A different seed really changes the run (dropout masks and initialisation).
    Run c(32, 20);
    hg::manual_seed(9);
    CHECK(run_synthetic(c, data, 0, 12) != la);
  }
}

TEST_CASE("determinism.mode_can_be_set_and_queried") {
  const bool initial = hg::are_deterministic_algorithms_enabled();
  CHECK_FALSE(initial);  // off by default
  {
    DeterministicScope on(true);
    CHECK(hg::are_deterministic_algorithms_enabled());
    // Every CPU kernel is deterministic: the embedding backward runs.
    const Tensor w = hg::randn({5, 3}, {.requires_grad = true});
    hg::sum(hg::embedding(hg::from_vector(std::vector<int64_t>{1, 1, 4}, {3}), w)).backward();
    CHECK(hg::sum(w.grad()).item<float>() == 9.0f);
    hg::use_deterministic_algorithms(false);
    CHECK_FALSE(hg::are_deterministic_algorithms_enabled());
  }
  CHECK(hg::are_deterministic_algorithms_enabled() == initial);
}

TEST_CASE("determinism.cuda_embedding_backward_refuses_in_deterministic_mode" *
          doctest::skip(!hg_test::cuda_available())) {
  const hg::Device cuda = hg::Device::cuda();
  const Tensor w = hg::randn({10, 4}).to(cuda).requires_grad_();
  const Tensor indices = hg::from_vector(std::vector<int64_t>{1, 2, 1}, {3}).to(cuda);
  {
    DeterministicScope on(true);
    const Tensor loss = hg::sum(hg::embedding(indices, w));  // the forward has no atomics: it runs
    CHECK_THROWS_HG(loss.backward(), "embedding");
  }
  // With the mode off, the same backward runs (row 1 gathered twice).
  DeterministicScope off(false);
  w.set_grad({});
  hg::sum(hg::embedding(indices, w)).backward();
  const std::vector<float> g = w.grad().to(hg::Device::cpu()).to_vector<float>();
  CHECK(g[1 * 4] == 2.0f);
  CHECK(g[2 * 4] == 1.0f);
  CHECK(g[0] == 0.0f);
}
