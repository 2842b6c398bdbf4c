// Fixtures for the hg-train command-line tests (hg_train_cli.sh):
//
//   hg_train_cli_fixtures datasets DIR
//       writes small Fashion-MNIST-shaped datasets under DIR: tiny/ (4096 training images, 64
//       test images), empty_test/, empty_train/ and images_32x32/;
//   hg_train_cli_fixtures edit IN OUT EDIT...
//       copies the checkpoint IN to OUT with each EDIT applied in order: drop:KEY,
//       rename:OLD=NEW, f64:KEY=VALUE or i64:KEY=VALUE (a 0-d tensor).
#include <cstdio>
#include <filesystem>
#include <string>

#include "halfgrad.h"

namespace {

// n images whose pixels follow their label (so a model can learn them), and n labels.
void write_split(const std::string& dir, const std::string& split, int64_t n, int64_t side) {
  hg::data::IdxArray images{0x08, {n, side, side}, {}}, labels{0x08, {n}, {}};
  for (int64_t k = 0; k < n; ++k) {
    const int64_t label = k % 10;
    labels.data.push_back(uint8_t(label));
    for (int64_t p = 0; p < side * side; ++p) images.data.push_back(uint8_t((p * (label + 1) * 37 + k) % 256));
  }
  hg::data::write_idx(dir + "/" + split + "-images-idx3-ubyte", images);
  hg::data::write_idx(dir + "/" + split + "-labels-idx1-ubyte", labels);
}

void write_dataset(const std::string& dir, int64_t train, int64_t test, int64_t side = 28) {
  std::filesystem::create_directories(dir);
  write_split(dir, "train", train, side);
  write_split(dir, "t10k", test, side);
}

// "KEY=VALUE" -> {KEY, VALUE}.
std::pair<std::string, std::string> split_assignment(const std::string& text) {
  const size_t eq = text.find('=');
  HG_CHECK(eq != std::string::npos, "expected KEY=VALUE, got ", text);
  return {text.substr(0, eq), text.substr(eq + 1)};
}

void edit(const std::string& in, const std::string& out, int count, char** edits) {
  hg::SafetensorsContents c = hg::load_with_metadata(in);
  for (int i = 0; i < count; ++i) {
    const std::string e = edits[i];
    const size_t colon = e.find(':');
    HG_CHECK(colon != std::string::npos, "edit ", e, ": expected OP:ARGUMENT");
    const std::string op = e.substr(0, colon), argument = e.substr(colon + 1);
    if (op == "drop") {
      HG_CHECK(c.tensors.erase(argument) == 1, "drop: no key ", argument);
    } else if (op == "rename") {
      const auto [from, to] = split_assignment(argument);
      auto node = c.tensors.extract(from);
      HG_CHECK(!node.empty(), "rename: no key ", from);
      node.key() = to;
      c.tensors.insert(std::move(node));
    } else if (op == "f64" || op == "i64") {
      const auto [key, value] = split_assignment(argument);
      c.tensors[key] = op == "f64" ? hg::full({}, std::stod(value), {.dtype = hg::f64})
                                   : hg::from_vector(std::vector<int64_t>{std::stoll(value)}, {});
    } else {
      HG_FAIL("unknown edit ", op);
    }
  }
  hg::save(out, c.tensors, c.metadata);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "datasets" && argc == 3) {
      const std::string dir = argv[2];
      write_dataset(dir + "/tiny", 4096, 64);
      write_dataset(dir + "/empty_test", 64, 0);
      write_dataset(dir + "/empty_train", 0, 64);
      write_dataset(dir + "/images_32x32", 64, 16, 32);
      return 0;
    }
    if (mode == "edit" && argc >= 4) {
      edit(argv[2], argv[3], argc - 4, argv + 4);
      return 0;
    }
    std::fprintf(stderr, "usage: %s datasets DIR | edit IN OUT EDIT...\n", argv[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hg_train_cli_fixtures: %s\n", e.what());
  }
  return 1;
}
