// models_compare: hg-train's five vision models (examples/train/models.h: mlp, cnn, mnist-net,
// ResNet-20, MobileNetV2-tiny) and its two text models (examples/train/text_models.h: gpt, lstm)
// trained by halfgrad and by LibTorch, layer for layer the same, in f32 and under bf16 autocast, at
// 1 and 2 threads; a table of samples/s (vision) and one of tokens/s (text) with the ratios.
//
//   build/bench/models_compare [--models resnet,gpt] [--steps-scale 1] [--rounds 1]
//
// Recipe: SGD lr 0.05 momentum 0.9, batch 128, cross-entropy, Fashion-MNIST batches in the same
// order for both (hg::data::DataLoader's); BatchNorm in training mode, dropout as the model has
// it. bf16: halfgrad's amp::Autocast(bf16) against LibTorch's CPU autocast (bf16) -- both keep
// f32 weights and run the convolutions and matmuls in bf16. Each measurement runs in a process of
// its own and is the best of 2 repeats of a model's step count (more steps for the small models);
// --rounds R alternates which framework goes first and keeps each one's best. HG_CPU_ISA caps
// both to one CPU level (bench/torch_bench_util.h). PyTorch 2.x from pip times the same recipe
// with bench/py/models_bench.py.
//
// Text recipe (hg-train --model gpt|lstm): batch 32 blocks of 64 bytes of the GPL-3 text
// (data::TextDataset, shuffled), next-byte cross-entropy on the logits cast to f32, backward,
// clip_grad_norm 1.0, AdamW (gpt lr 2e-3 wd 0.1, lstm lr 6e-3 wd 0.01), dropout 0.1 on.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <sstream>

#include <unistd.h>

#include "torch_bench_util.h"
#include "train/models.h"
#include "train/text_models.h"

namespace {

namespace tnn = torch::nn;

// ---- the models in LibTorch (bench/py/models.py is the same in Python) ---------------------------

struct TorchBasicBlockImpl : tnn::Module {
  tnn::Conv2d conv1, conv2;
  tnn::BatchNorm2d bn1, bn2;
  tnn::Sequential shortcut;
  TorchBasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(tnn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        conv2(tnn::Conv2dOptions(out, out, 3).padding(1).bias(false)),
        bn1(out),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut = tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                 tnn::BatchNorm2d(out));
      register_module("shortcut", shortcut);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    const torch::Tensor y = bn2(conv2(torch::relu(bn1(conv1(x)))));
    return torch::relu(y + (shortcut->size() == 0 ? x : shortcut->forward(x)));
  }
};

struct TorchInvertedResidualImpl : tnn::Module {
  tnn::Sequential conv;
  bool residual;
  TorchInvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expansion)
      : residual(stride == 1 && in == out) {
    const int64_t hidden = in * expansion;
    if (expansion != 1) {
      conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(in, hidden, 1).bias(false)));
      conv->push_back(tnn::BatchNorm2d(hidden));
      conv->push_back(tnn::ReLU6());
    }
    conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(hidden, hidden, 3).stride(stride).padding(1).groups(hidden).bias(false)));
    conv->push_back(tnn::BatchNorm2d(hidden));
    conv->push_back(tnn::ReLU6());
    conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(hidden, out, 1).bias(false)));
    conv->push_back(tnn::BatchNorm2d(out));
    register_module("conv", conv);
  }
  torch::Tensor forward(torch::Tensor x) { return residual ? x + conv->forward(x) : conv->forward(x); }
};

tnn::Sequential torch_model(const std::string& name) {
  tnn::Sequential m;
  const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t padding, bool bias) {
    return tnn::Conv2d(tnn::Conv2dOptions(in, out, k).padding(padding).bias(bias));
  };
  if (name == "mlp") {
    m = tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 256), tnn::ReLU(), tnn::Linear(256, 128), tnn::ReLU(),
                        tnn::Linear(128, 10));
  } else if (name == "cnn") {
    m = tnn::Sequential(conv(1, 16, 3, 1, true), tnn::ReLU(), tnn::MaxPool2d(2), conv(16, 32, 3, 1, true), tnn::ReLU(),
                        tnn::MaxPool2d(2), tnn::Flatten(), tnn::Linear(32 * 7 * 7, 10));
  } else if (name == "mnist-net") {
    m = tnn::Sequential(conv(1, 32, 3, 0, true), tnn::ReLU(), conv(32, 64, 3, 0, true), tnn::ReLU(), tnn::MaxPool2d(2),
                        tnn::Dropout(0.25), tnn::Flatten(), tnn::Linear(9216, 128), tnn::ReLU(), tnn::Dropout(0.5),
                        tnn::Linear(128, 10));
  } else if (name == "resnet") {
    m = tnn::Sequential(conv(1, 16, 3, 1, false), tnn::BatchNorm2d(16), tnn::ReLU());
    int64_t channels = 16;
    for (const int64_t width : {16, 32, 64})
      for (int block = 0; block < 3; ++block) {
        m->push_back(std::make_shared<TorchBasicBlockImpl>(channels, width, block == 0 && width != 16 ? 2 : 1));
        channels = width;
      }
    m->push_back(tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions({1, 1})));
    m->push_back(tnn::Flatten());
    m->push_back(tnn::Linear(64, 10));
  } else if (name == "mobilenet") {
    m = tnn::Sequential(conv(1, 16, 3, 1, false), tnn::BatchNorm2d(16), tnn::ReLU6());
    int64_t channels = 16;
    struct Stage {
      int64_t expansion, width, blocks, stride;
    };
    for (const Stage& s : {Stage{1, 16, 1, 1}, Stage{6, 24, 2, 2}, Stage{6, 32, 2, 2}, Stage{6, 64, 2, 1}})
      for (int64_t block = 0; block < s.blocks; ++block) {
        m->push_back(std::make_shared<TorchInvertedResidualImpl>(channels, s.width, block == 0 ? s.stride : 1, s.expansion));
        channels = s.width;
      }
    m->push_back(conv(channels, 128, 1, 0, false));
    m->push_back(tnn::BatchNorm2d(128));
    m->push_back(tnn::ReLU6());
    m->push_back(tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions({1, 1})));
    m->push_back(tnn::Flatten());
    m->push_back(tnn::Linear(128, 10));
  }
  return m;
}

// hg_train::GptBlock in LibTorch 1.13. NOTE: its C++ MultiheadAttention has no batch_first (the
// block transposes to [T, B, E] around it, as PyTorch's batch_first does inside) and no fused
// attention: it computes the [B*heads, T, T] scores and softmax (need_weights=false only skips the
// averaged weights), with the causal mask added as a -inf float mask. That is LibTorch 1.13's
// attention as a C++ user gets it; PyTorch 2.x's row (models_bench.py) runs the fused kernel.
struct TorchGptBlockImpl : tnn::Module {
  tnn::LayerNorm ln1, ln2;
  tnn::MultiheadAttention attn;
  tnn::Linear fc, proj;
  tnn::Dropout drop;
  TorchGptBlockImpl(int64_t d, int64_t heads, double dropout)
      : ln1(tnn::LayerNormOptions({d})), ln2(tnn::LayerNormOptions({d})),
        attn(tnn::MultiheadAttentionOptions(d, heads).dropout(dropout)), fc(d, 4 * d), proj(4 * d, d), drop(dropout) {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    register_module("fc", fc);
    register_module("proj", proj);
    register_module("drop", drop);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal) {
    const torch::Tensor h = ln1(x).transpose(0, 1);
    const auto [attended, weights] = attn->forward(h, h, h, /*key_padding_mask=*/{}, /*need_weights=*/false, causal);
    const torch::Tensor y = x + drop(attended.transpose(0, 1));
    return y + drop(proj(torch::gelu(fc(ln2(y)))));
  }
};
TORCH_MODULE(TorchGptBlock);

// hg_train::CharGPT (d_model 128, 4 heads, 2 blocks, block 64, dropout 0.1) and CharLSTM
// (embedding 64, LSTM 2 x 256 batch_first with dropout 0.1 between the layers).
struct TorchTextModelImpl : tnn::Module {
  bool gpt;
  tnn::Embedding tokens{nullptr}, positions{nullptr};
  std::vector<TorchGptBlock> blocks;
  tnn::LayerNorm ln_f{nullptr};
  tnn::LSTM lstm{nullptr};
  tnn::Linear head{nullptr};
  explicit TorchTextModelImpl(bool is_gpt) : gpt(is_gpt) {
    if (gpt) {
      tokens = register_module("tokens", tnn::Embedding(256, 128));
      positions = register_module("positions", tnn::Embedding(64, 128));
      for (int i = 0; i < 2; ++i)
        blocks.push_back(register_module("block" + std::to_string(i), TorchGptBlock(128, 4, 0.1)));
      ln_f = register_module("ln_f", tnn::LayerNorm(tnn::LayerNormOptions({128})));
      head = register_module("head", tnn::Linear(tnn::LinearOptions(128, 256).bias(false)));
    } else {
      tokens = register_module("tokens", tnn::Embedding(256, 64));
      lstm = register_module("lstm", tnn::LSTM(tnn::LSTMOptions(64, 256).num_layers(2).batch_first(true).dropout(0.1)));
      head = register_module("head", tnn::Linear(256, 256));
    }
  }
  torch::Tensor forward(const torch::Tensor& idx) {  // [B, T] -> [B, T, 256]
    if (!gpt) return head(std::get<0>(lstm(tokens(idx))));
    const int64_t T = idx.size(1);
    torch::Tensor x = tokens(idx) + positions(torch::arange(T, torch::kLong));
    const torch::Tensor causal = torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
    for (TorchGptBlock& block : blocks) x = block(x, causal);
    return head(ln_f(x));
  }
};
TORCH_MODULE(TorchTextModel);

bool is_text_model(const std::string& name) { return name == "gpt" || name == "lstm"; }

// ---- timing ---------------------------------------------------------------------------------------

// Samples (text models: tokens, `batch` = a batch's tokens) per second of `steps` steps after 3
// warm-up steps, the best of 2 repeats.
template <class Step>
double samples_per_second(int steps, int64_t batch, Step&& step) {
  for (int i = 0; i < 3; ++i) step(i);
  double best = 0;
  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(i);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(steps * batch) / seconds);
  }
  return best;
}

double run_halfgrad(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  hg::manual_seed(0);
  hg::nn::Sequential model = hg_train::make_model(name);
  model.train();
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  return samples_per_second(steps, batches[0].x.shape()[0], [&](int i) {
    const hg::data::Batch& b = batches[size_t(i) % batches.size()];
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(hg::bf16, bf16);
      loss = hg::cross_entropy(model(b.x), b.y);
    }
    loss.backward();
    opt.step();
  });
}

// What torch.autocast("cpu", torch.bfloat16) does around a forward: on, or off again.
void torch_cpu_autocast(bool on) {
  if (on) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  } else {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
  }
}

double run_libtorch(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  torch::manual_seed(0);
  tnn::Sequential model = torch_model(name);
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tb;
  for (const hg::data::Batch& b : batches) tb.emplace_back(hg_bench::to_torch(b.x), hg_bench::to_torch(b.y));
  return samples_per_second(steps, batches[0].x.shape()[0], [&](int i) {
    const auto& [x, y] = tb[size_t(i) % tb.size()];
    opt.zero_grad();
    if (bf16) torch_cpu_autocast(true);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    if (bf16) torch_cpu_autocast(false);
    loss.backward();
    opt.step();
  });
}

// Tokens per second of hg-train's text step: the same loss function, clipping and AdamW as
// hg-train --model gpt|lstm (text_trainer.cpp), without its schedule.
double run_halfgrad_text(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  hg::manual_seed(0);
  const bool gpt = name == "gpt";
  std::unique_ptr<hg::nn::Module> model;
  if (gpt) model = std::make_unique<hg_train::CharGPT>();
  else model = std::make_unique<hg_train::CharLSTM>();
  model->train();
  hg::optim::AdamW opt(model->parameters(), {.lr = gpt ? 2e-3 : 6e-3, .weight_decay = gpt ? 0.1 : 0.01});
  return samples_per_second(steps, batches[0].x.numel(), [&](int i) {
    const hg::data::Batch& b = batches[size_t(i) % batches.size()];
    opt.zero_grad();
    hg::Tensor loss = hg_train::next_byte_loss(*model, b.x, b.y, bf16 ? hg::bf16 : hg::f32);
    loss.backward();
    hg::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
  });
}

double run_libtorch_text(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  torch::manual_seed(0);
  const bool gpt = name == "gpt";
  TorchTextModel model(gpt);
  model->train();
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(gpt ? 2e-3 : 6e-3).weight_decay(gpt ? 0.1 : 0.01));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tb;
  for (const hg::data::Batch& b : batches) tb.emplace_back(hg_bench::to_torch(b.x), hg_bench::to_torch(b.y));
  return samples_per_second(steps, batches[0].x.numel(), [&](int i) {
    const auto& [x, y] = tb[size_t(i) % tb.size()];
    opt.zero_grad();
    if (bf16) torch_cpu_autocast(true);
    const torch::Tensor logits = model->forward(x);
    if (bf16) torch_cpu_autocast(false);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}).to(torch::kFloat),
                                                                     y.reshape({-1}));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
  });
}

// Steps per measurement: about the same time for each model (ResNet-20 and MobileNet take ~20x
// an MLP step).
int base_steps(const std::string& name) {
  if (name == "mlp") return 200;
  if (name == "cnn") return 60;
  if (name == "mnist-net") return 20;
  return 10;  // resnet, mobilenet; gpt and lstm: 2048 tokens a step, ~0.1 s at 1 thread
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string torch_caps = hg_bench::cap_torch_like_halfgrad(argv);
  std::string models_list = "mlp,cnn,mnist-net,resnet,mobilenet,gpt,lstm", threads_list = "1,2", precisions_list = "f32,bf16";
  double steps_scale = 1;
  int rounds = 1;
  const char* usage = "usage: models_compare [--models a,b] [--threads 1,2] [--precisions f32,bf16] [--steps-scale X] "
                      "[--rounds N]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "models_compare: option '%s' needs a value\n%s", argv[i], usage);
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--models") models_list = value;
    else if (flag == "--threads") threads_list = value;
    else if (flag == "--precisions") precisions_list = value;
    else if (flag == "--steps-scale") steps_scale = std::atof(value.c_str());
    else if (flag == "--rounds") rounds = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "models_compare: unknown option '%s'\n%s", flag.c_str(), usage);
      return 2;
    }
  }
  const std::vector<std::string> models = split(models_list), precisions = split(precisions_list);
  std::vector<int> thread_counts;
  for (const std::string& t : split(threads_list)) thread_counts.push_back(std::atoi(t.c_str()));
  for (const std::string& m : models)
    if (!is_text_model(m) &&
        std::find(std::begin(hg_train::kModelNames), std::end(hg_train::kModelNames), m) == std::end(hg_train::kModelNames)) {
      std::fprintf(stderr, "models_compare: unknown model '%s' (mlp, cnn, mnist-net, resnet, mobilenet, gpt, lstm)\n",
                   m.c_str());
      return 2;
    }
  for (const std::string& p : precisions)
    if (p != "f32" && p != "bf16") {
      std::fprintf(stderr, "models_compare: unknown precision '%s' (f32, bf16)\n", p.c_str());
      return 2;
    }
  if (!(steps_scale > 0) || rounds < 1 || thread_counts.empty() ||
      std::any_of(thread_counts.begin(), thread_counts.end(), [](int t) { return t < 1; })) {
    std::fprintf(stderr, "models_compare: --steps-scale must be > 0, --rounds and every thread count >= 1\n%s", usage);
    return 2;
  }
  try {
    std::vector<hg::data::Batch> images, text;  // the first 16 batches of each, in the loaders' order
    const bool any_vision = !std::all_of(models.begin(), models.end(), is_text_model);
    const bool any_text = std::any_of(models.begin(), models.end(), is_text_model);
    if (any_vision) {
      hg::data::FashionMNIST train;
      const hg::data::PixelStatistics stats = hg::data::pixel_statistics(train);
      hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0, .mean = stats.mean, .std = stats.std});
      for (auto batch : loader) {
        images.push_back(batch);
        if (images.size() == 16) break;
      }
    }
    if (any_text) {
      const hg::data::TextDataset gpl("/usr/share/common-licenses/GPL-3", 64);
      hg::data::DataLoader loader(gpl, {.batch_size = 32, .shuffle = true, .drop_last = true, .seed = 0});
      for (auto batch : loader) {
        text.push_back(batch);
        if (text.size() == 16) break;
      }
    }
    const std::string blas = hg_bench::torch_blas();
    std::printf("models_compare: vision batch 128 SGD, text batch 32 x 64 tokens AdamW; best of %d round(s) x 2 "
                "repeats; LibTorch %s (BLAS %s); halfgrad CPU level %s\n", rounds, TORCH_VERSION, blas.c_str(),
                hg::cpu::isa_summary().c_str());
    if (!torch_caps.empty()) std::printf("LibTorch capped to the same CPU level: %s\n", torch_caps.c_str());
    if (hg_bench::is_reference_blas(blas))
      std::printf("WARNING: LibTorch runs on the netlib reference BLAS: install libopenblas0-openmp for a fair reference\n");
    // A status line on a terminal while each row is measured (a row takes 10-60 s; the whole run
    // several minutes): which row of how many, and which side runs. Piped output stays the table.
    const bool terminal = isatty(STDERR_FILENO) != 0;
    const int total_rows = int(models.size() * precisions.size() * thread_counts.size());
    int row = 0;
    const auto status = [&](const std::string& what) {
      if (terminal) std::fprintf(stderr, "\r\033[K[%d/%d] %s", row, total_rows, what.c_str());
    };
    for (const bool text_table : {false, true}) {
      if (!(text_table ? any_text : any_vision)) continue;
      const char* unit = text_table ? "tokens/s" : "samples/s";
      std::printf("\n| model | precision | threads | halfgrad %s | LibTorch %s | halfgrad / LibTorch |\n"
                  "|---|---|---|---|---|---|\n", unit, unit);
      for (const std::string& name : models) {
        if (is_text_model(name) != text_table) continue;
        const std::vector<hg::data::Batch>& batches = text_table ? text : images;
        for (const std::string& precision : precisions)
          for (const int threads : thread_counts) {
            const bool bf16 = precision == "bf16";
            const int steps = std::max(1, int(base_steps(name) * steps_scale));
            const auto ours_run = [&] {
              hg::set_num_threads(threads);
              return (text_table ? run_halfgrad_text : run_halfgrad)(name, bf16, batches, steps);
            };
            const auto theirs_run = [&] {
              at::set_num_threads(threads);
              try {
                return (text_table ? run_libtorch_text : run_libtorch)(name, bf16, batches, steps);
              } catch (const c10::Error& e) {  // e.g. LibTorch 1.13 has no bf16 CPU kernel for hardtanh's backward
                const std::string what = e.what();
                std::fprintf(stderr, "LibTorch cannot train %s in %s: %s\n", name.c_str(), precision.c_str(),
                             what.substr(0, what.find('\n')).c_str());
                return 0.0;
              }
            };
            double ours = 0, theirs = 0;
            ++row;
            const std::string label = name + " " + precision + " " + std::to_string(threads) + " thread(s), round ";
            const auto measure_ours = [&](int round) {
              status(label + std::to_string(round + 1) + ": halfgrad");
              ours = std::max(ours, hg_bench::measure_in_child(ours_run));
            };
            const auto measure_theirs = [&](int round) {
              status(label + std::to_string(round + 1) + ": LibTorch");
              theirs = std::max(theirs, hg_bench::measure_in_child(theirs_run));
            };
            for (int round = 0; round < rounds; ++round) {
              if (round % 2 == 0) {
                measure_ours(round);
                measure_theirs(round);
              } else {
                measure_theirs(round);
                measure_ours(round);
              }
            }
            if (terminal) std::fprintf(stderr, "\r\033[K");
            if (theirs > 0)
              std::printf("| %s | %s | %d | %.0f | %.0f | %.2fx |\n", name.c_str(), precision.c_str(), threads, ours,
                          theirs, ours / theirs);
            else
              std::printf("| %s | %s | %d | %.0f | cannot run | - |\n", name.c_str(), precision.c_str(), threads, ours);
            std::fflush(stdout);
          }
      }
    }
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "models_compare: %s\n", e.what());
    return 1;
  }
  return 0;
}
