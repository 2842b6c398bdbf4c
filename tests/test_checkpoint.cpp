// hg::Checkpoint (core/checkpoint.h): one call saves and restores a whole training run. A small
// CNN with dropout trains through a real DataLoader (tiny IDX files written here, so no dataset
// is needed) with SGD + momentum, a StepLR schedule and a GradScaler; a run saved after N steps
// and resumed into fresh objects reaches bitwise the parameters of an uninterrupted run, in f32
// and under f16 autocast with a scaler that skipped steps. Then every way a file can disagree
// with what is registered, each one a clear hg::Error that changes nothing.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

// ---- a tiny Fashion-MNIST-shaped dataset on disk ----

void write_be32(std::ofstream& out, uint32_t v) {
  const char bytes[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.write(bytes, 4);
}

// `n` random 28x28 images and labels in IDX format, in a fresh directory.
std::string write_tiny_dataset(const std::string& name, int n) {
  const std::string dir = hg_test::temp_path(name);
  std::filesystem::create_directories(dir);
  hg::manual_seed(77);
  const std::vector<int64_t> pixels = hg::randint(0, 256, {n * 28 * 28}, {.dtype = hg::i64}).to_vector<int64_t>();
  const std::vector<int64_t> labels = hg::randint(0, 10, {n}, {.dtype = hg::i64}).to_vector<int64_t>();
  std::ofstream images(dir + "/train-images-idx3-ubyte", std::ios::binary);
  write_be32(images, 0x00000803);
  for (uint32_t d : {uint32_t(n), 28u, 28u}) write_be32(images, d);
  for (int64_t p : pixels) images.put(char(uint8_t(p)));
  std::ofstream label_file(dir + "/train-labels-idx1-ubyte", std::ios::binary);
  write_be32(label_file, 0x00000801);
  write_be32(label_file, uint32_t(n));
  for (int64_t l : labels) label_file.put(char(uint8_t(l)));
  return dir;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(hg::element_size(c.dtype())));
}

// ---- a whole training run: everything it owns is registered in its Checkpoint ----

struct Run {
  nn::Sequential model;
  hg::optim::SGD opt;
  hg::optim::StepLR schedule;
  hg::amp::GradScaler scaler;
  hg::data::DataLoader loader;
  int64_t step = 0;
  bool autocast;
  hg::Checkpoint checkpoint;
  int skipped = 0;
  std::vector<uint32_t> losses;  // bit patterns: "bitwise" means exactly that

  // The model's initialisation draws from the global generator: the seed is set first.
  Run(uint64_t seed, const hg::data::MNIST& data, bool f16)
      : model((hg::manual_seed(seed), nn::Sequential(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                                                     nn::Flatten(), nn::Dropout(0.25), nn::Linear(4 * 14 * 14, 10)))),
        opt(model.parameters(), {.lr = 0.05, .momentum = 0.9}),
        schedule(opt, 4, 0.5),
        // 2^30 overflows f16 in backward: the first steps are skipped while the scale backs off,
        // then it grows every 3 clean steps and overflows again now and then.
        scaler({.init_scale = std::ldexp(1.0, 30), .growth_interval = 3, .enabled = f16, .max_scale = std::ldexp(1.0, 30)}),
        loader(data, {.batch_size = 16, .shuffle = true, .seed = 5}),
        autocast(f16) {
    checkpoint.add("model", model).add("optimizer", opt).add("schedule", schedule).add("scaler", scaler)
        .add("loader", loader).add("step", step);
  }

  void train(int steps) {
    for (int done = 0; done < steps;) {
      for (auto batch = loader.begin(); batch != loader.end() && done < steps; ++done) {
        const auto [x, y] = *batch;
        ++batch;  // the loader's position must count this batch before any save
        opt.zero_grad();
        Tensor loss;
        {
          hg::amp::Autocast ac(hg::f16, autocast);
          loss = hg::cross_entropy(model(x), y);
        }
        scaler.scale(loss).backward();
        const hg::amp::StepResult result = scaler.step(opt);
        scaler.update();
        schedule.step(result);
        skipped += !result.applied;
        losses.push_back(std::bit_cast<uint32_t>(loss.item<float>()));
        ++step;
      }
    }
  }

  std::vector<std::vector<uint8_t>> parameter_bytes() const {
    std::vector<std::vector<uint8_t>> out;
    for (const Tensor& p : model.parameters()) out.push_back(bytes_of(p));
    return out;
  }
};

const hg::data::MNIST& tiny_data() {
  static const hg::data::MNIST data(write_tiny_dataset("checkpoint_data", 80));  // 5 batches per epoch
  return data;
}

// Train N steps, save, train M more; and separately: fresh objects (another seed, a disturbed
// generator), load, train M. The two must agree bit for bit.
void check_bitwise_resume(bool f16) {
  constexpr int kBefore = 7, kAfter = 9;  // the save falls mid-epoch; the rest crosses two epochs
  const std::string path = hg_test::temp_path(f16 ? "resume_f16.safetensors" : "resume_f32.safetensors");
  Run full(3, tiny_data(), f16);
  full.train(kBefore);
  full.checkpoint.save(path);
  full.train(kAfter);
  const hg::random::GeneratorState rng_after_full = hg::random::get_state();

  Run resumed(1234, tiny_data(), f16);
  hg::randn({999});
  resumed.checkpoint.load(path);
  CHECK(resumed.step == kBefore);
  resumed.train(kAfter);

  CHECK(resumed.parameter_bytes() == full.parameter_bytes());
  CHECK(std::vector<uint32_t>(full.losses.begin() + kBefore, full.losses.end()) == resumed.losses);
  CHECK(resumed.opt.lr() == full.opt.lr());
  CHECK(resumed.schedule.steps() == full.schedule.steps());
  CHECK(resumed.scaler.get_scale() == full.scaler.get_scale());
  CHECK(resumed.loader.epoch() == full.loader.epoch());
  CHECK(hg::random::get_state().offset == rng_after_full.offset);  // the same dropout draws, in the same places
  if (f16) {
    CHECK(full.skipped >= 3);                   // the scaler did skip, before and after the save
    CHECK(resumed.skipped >= 1);
    CHECK(full.scaler.get_scale() < std::ldexp(1.0, 30));
  } else {
    CHECK(full.skipped == 0);
  }
}

}  // namespace

TEST_CASE("checkpoint.resume_is_bitwise_f32") { check_bitwise_resume(false); }

TEST_CASE("checkpoint.resume_is_bitwise_f16_autocast_with_skipped_steps") { check_bitwise_resume(true); }

TEST_CASE("checkpoint.the_generator_and_the_loader_position_matter") {
  // Negative control: resuming without them (a checkpoint with only model, optimizer, schedule
  // and scaler) does not reproduce the run -- so the bitwise tests above test something.
  const std::string path = hg_test::temp_path("resume_partial.safetensors");
  Run full(3, tiny_data(), false);
  full.train(4);
  hg::Checkpoint partial;
  partial.add("model", full.model).add("optimizer", full.opt).add("schedule", full.schedule);
  partial.save(path);
  full.train(4);

  Run resumed(3, tiny_data(), false);
  hg::Checkpoint partial_here;
  partial_here.add("model", resumed.model).add("optimizer", resumed.opt).add("schedule", resumed.schedule);
  hg::randn({999});
  partial_here.load(path);  // restores the generator too: "rng" is always part of a Checkpoint
  resumed.train(4);         // but the loader starts its epoch from the beginning
  CHECK(resumed.parameter_bytes() != full.parameter_bytes());
}

TEST_CASE("checkpoint.metadata_names_the_format_version_and_parts") {
  const std::string path = hg_test::temp_path("metadata.safetensors");
  Run run(3, tiny_data(), true);
  run.checkpoint.set_metadata("precision", "f16").save(path);
  const hg::SafetensorsContents file = hg::load_with_metadata(path);
  CHECK(file.metadata.at("format") == "halfgrad-checkpoint");
  CHECK(file.metadata.at("format_version") == "2");
  CHECK(file.metadata.at("parts") == "rng,model,optimizer,schedule,scaler,loader,step");
  CHECK(file.metadata.at("precision") == "f16");
  CHECK(file.tensors.count("model.0.weight") == 1);
  CHECK(file.tensors.count("scaler.scale") == 1);
  CHECK(file.tensors.at("step.value").item<int64_t>() == 0);
  CHECK(hg::remove_stale_temporaries(path) == 0);  // written atomically: no temporary left behind
  run.checkpoint.load(path);
  CHECK(run.checkpoint.loaded_metadata().at("precision") == "f16");
}

TEST_CASE("checkpoint.a_disabled_scaler_saves_nothing_and_refuses_an_enabled_ones_state") {
  const std::string f16_path = hg_test::temp_path("scaler_f16.safetensors");
  const std::string f32_path = hg_test::temp_path("scaler_f32.safetensors");
  Run f16(3, tiny_data(), true), f32(3, tiny_data(), false);
  f16.checkpoint.save(f16_path);
  f32.checkpoint.save(f32_path);
  const hg::SafetensorsContents file = hg::load_with_metadata(f32_path);
  CHECK(std::none_of(file.tensors.begin(), file.tensors.end(), [](const auto& kv) { return kv.first.starts_with("scaler."); }));
  f32.checkpoint.load(f32_path);  // an empty part loads into a disabled scaler
  CHECK_THROWS_HG(f32.checkpoint.load(f16_path), "mismatched: scaler (the file holds the state of an enabled \"scaler\"");
  CHECK_THROWS_HG(f16.checkpoint.load(f32_path), "saved from a disabled GradScaler");
}

TEST_CASE("checkpoint.one_error_lists_missing_unexpected_and_mismatched_parts_and_nothing_changes") {
  const std::string path = hg_test::temp_path("mismatch.safetensors");
  hg::manual_seed(1);
  nn::Linear saved_model(4, 3);
  hg::optim::SGD saved_opt(saved_model.parameters(), {.lr = 0.1});
  int64_t epoch = 5;
  hg::Checkpoint writer;
  writer.add("model", saved_model).add("optimizer", saved_opt).add("epoch", epoch);
  writer.save(path);

  nn::Linear other_model(4, 2);  // another shape: mismatched
  hg::optim::SGD opt(other_model.parameters(), {.lr = 0.3});
  hg::amp::GradScaler scaler;
  hg::Checkpoint reader;
  reader.add("model", other_model).add("optimizer", opt).add("scaler", scaler);  // no "epoch"; a "scaler"
  const std::vector<uint8_t> weight_before = bytes_of(other_model.weight);
  const hg::random::GeneratorState rng_before = hg::random::get_state();
  std::string message;
  try {
    reader.load(path);
  } catch (const hg::Error& e) {
    message = e.what();
  }
  CHECK(message.find("does not match the parts registered here (rng, model, optimizer, scaler), nothing was loaded; missing") !=
        std::string::npos);
  CHECK(message.find("missing (registered here, not in the file): scaler") != std::string::npos);
  CHECK(message.find("unexpected (in the file, not registered here): \"epoch\"") != std::string::npos);
  CHECK(message.find("mismatched: model (load_state_dict: Error(s) in loading state_dict:") != std::string::npos);
  // Nothing changed: the parts that did load (rng, optimizer) were put back.
  CHECK(bytes_of(other_model.weight) == weight_before);
  CHECK(opt.lr() == 0.3);
  CHECK(hg::random::get_state().seed == rng_before.seed);
  CHECK(hg::random::get_state().offset == rng_before.offset);
}

TEST_CASE("checkpoint.files_that_are_not_checkpoints_or_too_new_are_refused") {
  hg::manual_seed(0);
  nn::Linear model(2, 2);
  hg::Checkpoint checkpoint;
  checkpoint.add("model", model);
  const std::string other = hg_test::temp_path("other_format.safetensors");
  hg::save(other, model.state_dict(), {{"format", "pt"}});
  CHECK_THROWS_HG(checkpoint.load(other), "has format \"pt\", not \"halfgrad-checkpoint\"");
  const std::string newer = hg_test::temp_path("newer.safetensors");
  hg::save(newer, {}, {{"format", "halfgrad-checkpoint"}, {"format_version", "3"}, {"parts", "rng"}});
  CHECK_THROWS_HG(checkpoint.load(newer), "has format_version \"3\"; this build of halfgrad reads versions up to 2");
  const std::string damaged = hg_test::temp_path("damaged.safetensors");
  hg::save(damaged, {}, {{"format", "halfgrad-checkpoint"}});
  CHECK_THROWS_HG(checkpoint.load(damaged), "names the format but not its format_version and parts");
  CHECK_THROWS_HG(checkpoint.load(hg_test::temp_path("no_such_file.safetensors")), "no_such_file");
}

TEST_CASE("checkpoint.version_0_files_load_by_key_prefix") {
  // hg-train's checkpoints from before hg::Checkpoint: the same "<part>.<key>" layout, no metadata,
  // and no keys at all for a disabled GradScaler.
  hg::manual_seed(0);
  nn::Linear model(2, 2);
  hg::amp::GradScaler scaler({.enabled = false});
  hg::Checkpoint checkpoint;
  checkpoint.add("model", model).add("scaler", scaler);
  std::map<std::string, Tensor> old;
  for (const auto& [k, v] : model.state_dict()) old["model." + k] = hg::full(v.shape(), 0.25);
  old["rng.seed"] = hg::from_vector(std::vector<int64_t>{42}, {});
  old["rng.offset"] = hg::from_vector(std::vector<int64_t>{7}, {});
  const std::string path = hg_test::temp_path("version0.safetensors");
  hg::save(path, old, {{"written_by", "hg-train"}});
  checkpoint.load(path);
  CHECK(model.weight.to_vector<float>() == std::vector<float>(4, 0.25f));
  CHECK(hg::random::get_state().seed == 42);
  CHECK(hg::random::get_state().offset == 7);
}

TEST_CASE("checkpoint.part_names_and_metadata_keys_are_checked") {
  hg::Checkpoint checkpoint;
  int64_t step = 0, other = 0;
  checkpoint.add("step", step);
  CHECK_THROWS_HG(checkpoint.add("step", other), "a part named \"step\" is already registered");
  CHECK_THROWS_HG(checkpoint.add("rng", other), "the random generator is always saved as \"rng\"");
  CHECK_THROWS_HG(checkpoint.add("a.b", other), "hold no '.' or ','");
  CHECK_THROWS_HG(checkpoint.add("", other), "must be non-empty");
  CHECK_THROWS_HG(checkpoint.set_metadata("parts", "x"), "\"parts\" is reserved");
  CHECK(checkpoint.part_names() == std::vector<std::string>{"rng", "step"});
}

TEST_CASE("checkpoint.required_metadata_is_checked_before_anything_loads") {
  const std::string path = hg_test::temp_path("required.safetensors");
  int64_t step = 4;
  hg::Checkpoint writer;
  writer.add("step", step).require_metadata("model", "cnn");
  writer.save(path);
  int64_t other_step = 9;
  hg::Checkpoint reader;
  reader.add("step", other_step).require_metadata("model", "mlp");
  CHECK_THROWS_HG(reader.load(path), "was written with model \"cnn\", not mlp");
  CHECK(other_step == 9);
  reader.require_metadata("model", "cnn");
  reader.load(path);
  CHECK(other_step == 4);
}

TEST_CASE("checkpoint.counters_round_trip") {
  const std::string path = hg_test::temp_path("counters.safetensors");
  int64_t epoch = 3, step = -12;
  hg::Checkpoint writer;
  writer.add("epoch", epoch).add("step", step);
  writer.save(path);
  epoch = 0, step = 0;
  writer.load(path);
  CHECK(epoch == 3);
  CHECK(step == -12);
}

// ---- issue 25, item 2: "bitwise resume" means every key used and every needed key present ----

namespace {
// A part that reads one key and would silently ignore any other: the kind of user part the
// Checkpoint's own check (format 2: a part saves back exactly the keys it loaded) protects.
struct LenientPart {
  double value = 1.0;
  std::map<std::string, Tensor> state_dict() const { return {{"value", hg::full({}, value, {.dtype = hg::f64})}}; }
  void load_state_dict(const std::map<std::string, Tensor>& state) {
    if (state.count("value")) value = state.at("value").item<double>();  // a missing key keeps the default
  }
};
}  // namespace

TEST_CASE("checkpoint.every_key_is_used_and_every_needed_key_is_there") {
  const std::string path = hg_test::temp_path("strict.safetensors");
  LenientPart part{3.0};
  int64_t step = 5;
  hg::Checkpoint writer;
  writer.add("part", part).add("step", step);
  writer.save(path);
  const hg::SafetensorsContents good = hg::load_with_metadata(path);

  LenientPart loaded;
  int64_t loaded_step = 0;
  hg::Checkpoint reader;
  reader.add("part", loaded).add("step", loaded_step);
  const auto load_edited = [&](const std::function<void(std::map<std::string, Tensor>&)>& edit) {
    hg::SafetensorsContents file = good;
    edit(file.tensors);
    reader.load(file, "edited");
  };
  // A key under no part the file lists (a flipped bit in "part.") is refused, not ignored.
  CHECK_THROWS_HG(load_edited([](auto& t) { t["pa|t.value"] = t.at("part.value"); t.erase("part.value"); }),
                  "keys under no part the file lists: \"pa|t.value\"");
  // A part that would ignore a key, or fill one in with a default, is refused.
  CHECK_THROWS_HG(load_edited([](auto& t) { t["part.valu3"] = t.at("part.value"); t.erase("part.value"); }),
                  "mismatched: part (part: keys it did not use: \"valu3\"; keys it needs that the file lacks: \"value\")");
  CHECK(loaded.value == 1.0);  // nothing was loaded
  CHECK(loaded_step == 0);
  // A diverged run's state is refused, naming the tensor.
  CHECK_THROWS_HG(load_edited([](auto& t) { t["part.value"] = hg::full({}, std::nan(""), {.dtype = hg::f64}); }),
                  "inf/NaN values (the run had diverged: resume from an earlier checkpoint) in: \"part.value\" (1 of 1)");
  reader.load(path);
  CHECK(loaded.value == 3.0);
  CHECK(loaded_step == 5);
  CHECK(reader.state_dict().size() == good.tensors.size());
}

TEST_CASE("checkpoint.format_1_files_still_load") {
  // Written by the format-1 writer (2026-12-03/04): the same layout, format_version "1", and a
  // loader position that counts batches.
  const hg::data::MNIST& data = tiny_data();
  hg::data::DataLoader loader(data, {.batch_size = 16, .seed = 5});
  hg::Checkpoint checkpoint;
  checkpoint.add("loader", loader);
  std::map<std::string, Tensor> old = {{"loader.epoch", hg::full({}, 1.0, {.dtype = hg::i64})},
                                       {"loader.position", hg::full({}, 2.0, {.dtype = hg::i64})}};
  old["rng.seed"] = hg::from_vector(std::vector<int64_t>{42}, {});
  old["rng.offset"] = hg::from_vector(std::vector<int64_t>{7}, {});
  const std::string path = hg_test::temp_path("version1.safetensors");
  hg::save(path, old, {{"format", "halfgrad-checkpoint"}, {"format_version", "1"}, {"parts", "rng,loader"}});
  checkpoint.load(path);
  CHECK(loader.epoch() == 1);
  CHECK(loader.epoch_sample() == 32);  // 2 batches of 16
}
