// nn containers (issue 27): ModuleList, ModuleDict and Identity give PyTorch's state_dict keys
// (blocks.0.conv.weight), share their children between copies, refuse what PyTorch refuses, and a
// model built of them loads into torch.nn.ModuleList/ModuleDict and back
// (tests/load_into_torch.py, when /usr/bin/python3 has torch).
#include <cstdlib>
#include <filesystem>

#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

// A residual block: x + relu(norm(conv(x))), PyTorch's Block in tests/load_into_torch.py.
struct Block : nn::Module {
  nn::Conv2d conv;
  nn::BatchNorm2d norm;
  explicit Block(int64_t channels) : conv(channels, channels, 3, {.padding = 1, .bias = false}), norm(channels) {
    register_module("conv", conv);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) override { return x + hg::relu(norm(conv(x))); }
};

// tests/load_into_torch.py's Blocks.
struct Blocks : nn::Module {
  nn::Conv2d stem{1, 4, 3, {.padding = 1}};
  nn::ModuleList blocks;
  nn::ModuleDict heads;
  nn::Identity shortcut;
  Blocks() {
    register_module("stem", stem);
    for (int i = 0; i < 2; ++i) blocks.push_back(Block(4));
    register_module("blocks", blocks);
    heads.insert("digit", nn::Linear(4, 10)).insert("parity", nn::Linear(4, 2));
    register_module("heads", heads);
    register_module("shortcut", shortcut);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = stem(x);
    for (nn::Module& block : blocks) y = block(y);
    y = hg::mean(shortcut(y), {2, 3});
    return hg::cat({heads["digit"](y), heads["parity"](y)}, 1);
  }
};

std::vector<std::string> keys_of(const std::map<std::string, Tensor>& state) {
  std::vector<std::string> out;
  for (const auto& [key, _] : state) out.push_back(key);
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

TEST_CASE("nn.containers.keys_are_pytorchs") {
  Blocks model;
  const std::vector<std::string> expected = {
      "blocks.0.conv.weight",      "blocks.0.norm.bias",         "blocks.0.norm.num_batches_tracked",
      "blocks.0.norm.running_mean", "blocks.0.norm.running_var",  "blocks.0.norm.weight",
      "blocks.1.conv.weight",      "blocks.1.norm.bias",         "blocks.1.norm.num_batches_tracked",
      "blocks.1.norm.running_mean", "blocks.1.norm.running_var",  "blocks.1.norm.weight",
      "heads.digit.bias",          "heads.digit.weight",         "heads.parity.bias",
      "heads.parity.weight",       "stem.bias",                  "stem.weight"};
  CHECK(keys_of(model.state_dict()) == expected);
  CHECK(model.parameters().size() == 12);  // stem 2, blocks 2 x (conv 1 + norm 2), heads 4
}

TEST_CASE("nn.containers.module_list_indexing_iteration_and_sharing") {
  nn::ModuleList list(nn::Linear(2, 3), nn::ReLU());
  CHECK(list.size() == 2);
  CHECK_FALSE(list.empty());
  CHECK(list.at<nn::Linear>(0).out_features == 3);
  CHECK_THROWS_HG(list.at<nn::Linear>(1), "module 1 is not of the type");
  CHECK_THROWS_AS(list[2], hg::Error);
  int count = 0;
  for (nn::Module& m : list) count += int(m.parameters().size());
  CHECK(count == 2);
  CHECK_THROWS_HG(list(hg::zeros({1, 2})), "ModuleList");  // a list holds modules; it is not called

  // A registered list and the member share children: adding after registration shows up in the
  // parent's parameters, as in PyTorch.
  struct Parent : nn::Module {
    nn::ModuleList layers;
    Parent() { register_module("layers", layers); }
    Tensor forward(const Tensor& x) override { return x; }
  } parent;
  parent.layers.push_back(nn::Linear(2, 2));
  const nn::ModuleList copy = parent.layers;
  copy.at<nn::Linear>(0).weight.detach().fill_(3.0);
  CHECK(parent.state_dict().at("layers.0.weight").to_vector<float>() == std::vector<float>(4, 3.0f));
  CHECK(parent.parameters().size() == 2);
}

TEST_CASE("nn.containers.module_dict_in_insertion_order") {
  nn::ModuleDict dict;
  dict.insert("b", nn::Linear(1, 1)).insert("a", nn::Identity());
  CHECK(dict.keys() == std::vector<std::string>{"b", "a"});
  CHECK(dict.contains("a"));
  CHECK_FALSE(dict.contains("c"));
  CHECK(dict.size() == 2);
  const Tensor x = hg::ones({2, 1});
  CHECK(bitwise_equal(dict["a"](x), x));
  CHECK_THROWS_HG(dict["c"], "\"c\"");
  CHECK_THROWS_HG(dict.insert("b", nn::ReLU()), "already in the dict");
  CHECK_THROWS_AS(dict.insert("x.y", nn::ReLU()), hg::Error);  // '.' separates the key's levels
  CHECK_THROWS_AS(dict(x), hg::Error);
}

TEST_CASE("nn.containers.state_dict_round_trip_and_train_eval_reach_the_children") {
  hg::manual_seed(3);
  Blocks a;
  const std::string path = hg_test::temp_path("blocks.safetensors");
  nn::save(a, path);
  hg::manual_seed(4);
  Blocks b;
  CHECK_FALSE(bitwise_equal(b.state_dict().at("blocks.1.conv.weight"), a.state_dict().at("blocks.1.conv.weight")));
  nn::load(b, path);
  a.eval();
  b.eval();
  CHECK_FALSE(b.blocks.at<Block>(1).norm.is_training());
  const Tensor x = hg::randn({2, 1, 5, 5});
  hg::NoGradGuard no_grad;
  CHECK(bitwise_equal(b(x), a(x)));
}

TEST_CASE("nn.containers.module_list_model_loads_into_torch") {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
    MESSAGE("skipped: /usr/bin/python3 with torch is not available");
    return;
  }
  hg::manual_seed(5);
  Blocks model;
  {  // a few training-mode passes: running statistics off their defaults
    hg::NoGradGuard no_grad;
    for (int k = 0; k < 3; ++k) model(hg::randn({8, 1, 6, 6}));
  }
  model.eval();
  const std::string dir = hg_test::temp_path("torch_interop_blocks");
  std::filesystem::create_directories(dir);
  nn::save(model, dir + "/blocks.safetensors");
  const Tensor x = hg::randn({3, 1, 6, 6});
  {
    hg::NoGradGuard no_grad;
    hg::save(dir + "/io.safetensors", {{"x", x}, {"y", model(x)}});
  }
  const std::string command = "/usr/bin/python3 " + std::string(HG_TEST_DIR) + "/load_into_torch.py " + dir + " blocks";
  REQUIRE(std::system(command.c_str()) == 0);
  Blocks from_torch;
  nn::load(from_torch, dir + "/torch_blocks.safetensors");
  from_torch.eval();
  const auto io = hg::load(dir + "/torch_io.safetensors");
  hg::NoGradGuard no_grad;
  CHECK_CLOSE_TOL(from_torch(io.at("x")), io.at("y"), 1e-5, 1e-5);  // summation order differs from torch
}
