// Writes the seed corpora of the fuzz targets: small valid inputs of each format, made with the
// library's own writers, so that libFuzzer starts from the formats' structure.
//
//   make_fuzz_seeds DIR     ->  DIR/json/, DIR/safetensors/, DIR/idx/, DIR/load_state_dict/, DIR/checkpoint/
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz_support.h"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw hg::Error("make_fuzz_seeds: cannot write " + path.string());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void json_seeds(const fs::path& dir) {
  const char* documents[] = {
      "{}",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
      R"([1,-2,3.5e+10,0.25,-0,1E-3,18446744073709551615,18446744073709551616])",
      R"({"a":[true,false,null,{"b":[[[]]]}],"s":"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"})",
      "\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"",
      R"({"k1":1,"k2":2,"k3":{"k1":[]}})",
  };
  int n = 0;
  for (const char* d : documents) write_file(dir / ("doc" + std::to_string(n++) + ".json"), d);
}

void safetensors_seeds(const fs::path& dir) {
  hg::manual_seed(1);
  std::map<std::string, hg::Tensor> every;
  for (const hg::DTypeInfo& info : hg::kDTypeTable)
    every[std::string(info.name)] = hg::is_float8(info.dtype) ? hg::randn({2, 3}).to(info.dtype)  // storage only
                                    : info.is_floating          ? hg::randn({2, 3}, {.dtype = info.dtype})
                                                                : hg::randint(0, 50, {3}, {.dtype = info.dtype});
  hg::save((dir / "every_dtype.safetensors").string(), every, {{"format", "pt"}});
  hg::save((dir / "scalar_and_empty.safetensors").string(),
           {{"scalar", hg::full({}, 2.5)}, {"empty", hg::empty({0, 4}, {.dtype = hg::bf16})}});
  hg::save((dir / "nothing.safetensors").string(), {});
}

// `first` followed by `rest`: the selector byte some targets read before their input.
std::string with_first_byte(char first, const std::string& rest) {
  std::string out(1, first);
  out.append(rest);
  return out;
}

// IDX seeds carry the fuzz target's first byte: 0 = stored as is, 1 = gzipped by the target.
void idx_seeds(const fs::path& dir) {
  const fs::path scratch = dir / "scratch.idx";
  const auto seed = [&](const std::string& name, const hg::data::IdxArray& array) {
    hg::data::write_idx(scratch.string(), array);
    const std::string plain = read_file(scratch);
    write_file(dir / (name + ".plain"), with_first_byte(0, plain));
    write_file(dir / (name + ".gzip"), with_first_byte(1, plain));
    hg::data::write_idx(scratch.string(), array, /*gzip=*/true);  // a real .gz, stored as is
    write_file(dir / (name + ".gz"), with_first_byte(0, read_file(scratch)));
  };
  hg::data::IdxArray images{0x08, {2, 4, 4}, std::vector<uint8_t>(32)}, labels{0x08, {5}, {0, 1, 2, 9, 3}};
  for (size_t i = 0; i < images.data.size(); ++i) images.data[i] = uint8_t(i * 7);
  seed("images", images);
  seed("labels", labels);
  seed("f32", {0x0D, {2}, {0, 0, 128, 63, 0, 0, 0, 64}});
  fs::remove(scratch);
}

// Checkpoints after two real training steps, one per optimizer kind (the first byte picks it),
// written by `save`: the parts as hg-train once saved them (load_state_dict target) or a whole
// hg::Checkpoint (checkpoint target).
template <class Setup, class Save>
void checkpoint_seeds(const fs::path& dir, Save save) {
  for (int kind = 0; kind < hg_fuzz::kOptimizerKinds; ++kind) {
    Setup setup{hg_fuzz::OptimizerKind(kind)};
    for (int step = 0; step < 2; ++step) {
      if constexpr (requires { setup.train_step(); }) setup.train_step();
      else setup.step();
    }
    const fs::path file = dir / "checkpoint.tmp";
    save(setup, file.string());
    write_file(dir / ("checkpoint_" + std::to_string(kind)), with_first_byte(char(kind), read_file(file)));
    fs::remove(file);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 1;
  }
  try {
    hg::set_num_threads(1);
    const fs::path root = argv[1];
    for (const char* target : {"json", "safetensors", "idx", "load_state_dict", "checkpoint"})
      fs::create_directories(root / target);
    json_seeds(root / "json");
    safetensors_seeds(root / "safetensors");
    idx_seeds(root / "idx");
    checkpoint_seeds<hg_fuzz::TrainingSetup>(root / "load_state_dict", [](const auto& setup, const std::string& path) {
      hg::save(path, setup.state_dict());
    });
    checkpoint_seeds<hg_fuzz::CheckpointSetup>(root / "checkpoint", [](const auto& setup, const std::string& path) {
      setup.checkpoint.save(path);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
