// hg::autograd::checkpoint (ops/checkpoint.h): the gradients are the same bits as without it
// (dropout's masks replayed, autocast as in forward), captured parameters get theirs, the
// activations inside are not kept, and an input changed in place before backward is an error.
#include <vector>

#include "ops_test_helpers.h"

namespace nn = hg::nn;

namespace {

// Linear -> GELU -> Dropout -> Linear, the parameters captured by the function.
struct Block {
  nn::Linear first{16, 64}, second{64, 16};
  nn::Dropout dropout{0.3};
  Tensor operator()(const Tensor& x) { return second(dropout(hg::gelu(first(x)))); }
  std::vector<Tensor> parameters() const { return {first.weight, first.bias, second.weight, second.bias}; }
};

// Every parameter's and the input's gradient after one backward, checkpointed or not.
std::vector<std::vector<float>> gradients(bool checkpointed, bool input_needs_grad, bool autocast) {
  hg::manual_seed(21);
  Block a, b;
  Tensor x = hg::randn({8, 16});
  if (input_needs_grad) x.requires_grad_(true);
  hg::manual_seed(99);  // the same dropout masks in both runs
  Tensor loss;
  {
    hg::amp::Autocast guard(hg::bf16, autocast);
    const auto run = [&](const Tensor& in, Block& block) {
      if (!checkpointed) return block(in);
      return hg::autograd::checkpoint([&block](const std::vector<Tensor>& v) { return block(v[0]); }, {in});
    };
    loss = hg::sum(hg::pow(run(run(x, a), b).to(hg::f32), 2.0));
  }
  loss.backward();
  std::vector<std::vector<float>> grads;
  for (const Block* block : {&a, &b})
    for (const Tensor& p : block->parameters()) grads.push_back(p.grad().to_vector<float>());
  if (input_needs_grad) grads.push_back(x.grad().to_vector<float>());
  return grads;
}

}  // namespace

TEST_CASE("checkpoint.gradients_are_the_same_bits_with_dropout_and_captured_parameters") {
  CHECK(gradients(true, true, false) == gradients(false, true, false));
  // Only captured parameters need gradients (the input is data): they still get them.
  CHECK(gradients(true, false, false) == gradients(false, false, false));
}

TEST_CASE("checkpoint.autocast_is_replayed_in_the_recomputation") {
  CHECK(gradients(true, true, true) == gradients(false, true, true));
}

TEST_CASE("checkpoint.activations_inside_are_not_kept_until_backward") {
  // Eight blocks of wide activations: without checkpointing every block's GELU input and output
  // (and dropout mask) stay alive until backward; with it only each block's input does.
  const auto held_after_forward = [](bool checkpointed) {
    hg::manual_seed(3);
    std::vector<nn::Linear> layers;
    for (int i = 0; i < 8; ++i) layers.emplace_back(64, 64);
    const Tensor x = hg::randn({256, 64}).requires_grad_(true);
    const int64_t base = hg::memory::allocated();
    Tensor h = x;
    for (nn::Linear& layer : layers) {
      const auto block = [&layer](const std::vector<Tensor>& v) { return hg::gelu(layer(hg::gelu(v[0]))); };
      h = checkpointed ? hg::autograd::checkpoint(block, {h}) : block({h});
    }
    const int64_t held = hg::memory::allocated() - base;
    hg::sum(h).backward();
    return held;
  };
  const int64_t with = held_after_forward(true), without = held_after_forward(false);
  CAPTURE(with);
  CAPTURE(without);
  CHECK(with * 2 < without);
}

TEST_CASE("checkpoint.without_grad_mode_it_just_runs_and_an_input_changed_in_place_is_an_error") {
  const Tensor x = hg::randn({3}).requires_grad_(true);
  int calls = 0;
  const auto fn = [&calls](const std::vector<Tensor>& v) {
    ++calls;
    return v[0] * 2.0;
  };
  {
    hg::NoGradGuard no_grad;
    CHECK(!hg::autograd::checkpoint(fn, {x}).requires_grad());
  }
  CHECK(calls == 1);
  Tensor leaf = hg::randn({3}).requires_grad_(true);
  Tensor y = leaf * 1.0;
  const Tensor out = hg::autograd::checkpoint(fn, {y});
  {
    hg::NoGradGuard no_grad;
    y.add_(hg::ones({3}));
  }
  CHECK_THROWS_HG(hg::sum(out).backward(), "saved by 'checkpoint' for its backward was modified by an in-place operation");
  CHECK_THROWS_HG(hg::autograd::checkpoint({}, {x}), "checkpoint: expected a function");
}
