// checkpoint_bench: what activation checkpointing (hg::autograd::checkpoint around each block, as
// hg-train --checkpoint-activations does) buys and costs on hg-train's character GPT at a long
// context: a training step's peak memory and time, without it, with it around each block, and
// around each half-block (the attention and the MLP branch apart), and the ratios to without.
//
//   build/bench/checkpoint_bench [--block 512] [--batch 8] [--threads 1] [--precisions f32,bf16]
//                                [--dropouts 0.1,0]
//
// The model is hg_train::CharGPT (d_model 128, 4 heads, 2 blocks) with a context of --block
// tokens; the step is hg-train's: next-byte cross-entropy on the logits cast to f32, backward,
// clip_grad_norm 1.0, AdamW, on batches of the GPL-3 text. Step peak: hg::memory's most bytes live
// during a step above what was live before it (parameters, AdamW state, the batch), after 2 warm-up
// steps; "saved" is what the forward leaves live for the backward (allocated once the loss is
// computed, above the same base). Step ms: the median of repeated steps (bench_util.h). Dropout
// 0.1 (the model's) makes scaled_dot_product_attention take its composed path, which materialises
// the [B, heads, T, T] scores; dropout 0 runs the fused kernel.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "halfgrad.h"
#include "train/text_models.h"

namespace {

using hg::Tensor;
using hg_train::CharGPT;

using hg_train::Checkpointing;
const char* const kModeNames[] = {"none", "each block", "each half-block"};

struct Measured {
  double saved_mib, peak_mib, ms;
};

Measured measure(const hg_train::TextModelConfig& shape, hg::DType dtype, Checkpointing mode,
                 const std::vector<hg::data::Batch>& batches) {
  hg::manual_seed(0);
  CharGPT model(shape);
  model.train();
  hg::optim::AdamW opt(model.parameters(), {.lr = 2e-3, .weight_decay = 0.1});
  size_t next = 0;
  double saved = 0;
  const auto step = [&] {
    const hg::data::Batch& b = batches[next++ % batches.size()];
    opt.zero_grad();
    const int64_t base = hg::memory::allocated();
    Tensor loss;
    {
      std::optional<hg::amp::Autocast> autocast;
      if (dtype != hg::f32) autocast.emplace(dtype);
      model.checkpointing = mode;
      const Tensor logits = model(b.x);
      loss = hg::cross_entropy(logits.reshape({-1, hg::data::TextDataset::kVocabSize}).to(hg::f32), b.y.reshape({-1}));
    }
    saved = double(hg::memory::allocated() - base) / (1 << 20);
    loss.backward();
    hg::nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
  };
  step();
  step();
  opt.zero_grad();
  const int64_t before = hg::memory::allocated();
  hg::memory::reset_peak();
  step();
  const double peak = double(hg::memory::peak_allocated() - before) / (1 << 20);
  return {saved, peak, hg_bench::time_it(step, 3.0) * 1e3};
}

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0, end; start <= text.size(); start = end + 1) {
    end = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, end - start));
  }
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> options = {
      {"--block", "512"}, {"--batch", "8"}, {"--threads", "1"}, {"--precisions", "f32,bf16"}, {"--dropouts", "0.1,0"}};
  const char* usage = "usage: checkpoint_bench [--block 512] [--batch 8] [--threads 1] [--precisions f32,bf16] "
                      "[--dropouts 0.1,0]\n";
  for (int i = 1; i < argc; i += 2) {
    const auto option = options.find(argv[i]);
    if (option == options.end() || i + 1 >= argc) {
      const bool help = std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h";
      std::fprintf(help ? stdout : stderr, "%s", usage);
      return help ? 0 : 2;
    }
    option->second = argv[i + 1];
  }
  const int64_t block = std::atoll(options["--block"].c_str()), batch = std::atoll(options["--batch"].c_str());
  const int threads = std::atoi(options["--threads"].c_str());
  if (block < 1 || batch < 1 || threads < 1) {
    std::fprintf(stderr, "checkpoint_bench: --block, --batch and --threads must be >= 1\n%s", usage);
    return 2;
  }
  try {
    hg::set_num_threads(threads);
    const hg::data::TextDataset gpl("/usr/share/common-licenses/GPL-3", block);
    hg::data::DataLoader loader(gpl, {.batch_size = batch, .shuffle = true, .drop_last = true, .seed = 0});
    std::vector<hg::data::Batch> batches;
    for (auto b : loader) {
      batches.push_back(b);
      if (batches.size() == 4) break;
    }
    HG_CHECK(!batches.empty(), "the GPL-3 text holds fewer than ", batch, " blocks of ", block, " tokens");
    std::printf("checkpoint_bench: CharGPT d_model 128, 4 heads, 2 blocks, context %lld, batch %lld, AdamW, "
                "%d thread(s), CPU level %s\n\n", (long long)block, (long long)batch, threads, hg::cpu::isa_summary().c_str());
    std::printf("| precision | dropout | checkpointing | saved MiB | step peak MiB | peak / none | step ms | time / none "
                "|\n|---|---|---|---|---|---|---|---|\n");
    for (const std::string& precision : comma_list(options["--precisions"]))
      for (const std::string& drop : comma_list(options["--dropouts"])) {
        const hg::DType dtype = precision == "bf16" ? hg::bf16 : precision == "f16" ? hg::f16 : hg::f32;
        hg_train::TextModelConfig shape{.block = block, .d_model = 128, .heads = 4, .layers = 2,
                                        .dropout = std::atof(drop.c_str())};
        Measured none{};
        for (const Checkpointing mode : {Checkpointing::none, Checkpointing::blocks, Checkpointing::branches}) {
          const Measured m = measure(shape, dtype, mode, batches);
          if (mode == Checkpointing::none) none = m;
          std::printf("| %s | %s | %s | %.1f | %.1f | %.2fx | %.0f | %.2fx |\n", precision.c_str(), drop.c_str(),
                      kModeNames[int(mode)], m.saved_mib, m.peak_mib, m.peak_mib / none.peak_mib, m.ms, m.ms / none.ms);
        }
        std::fflush(stdout);
      }
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
