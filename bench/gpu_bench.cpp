// gpu_bench: halfgrad on one CUDA device.
//   1. GEMM TFLOP/s of hg::matmul at n x n x n, n = 4096 and 8192, for f32 (TF32 off), f32 with
//      TF32 allowed (hg::cuda::allow_tf32), f16 and bf16.
//   1b. FP8 (sm_89+): TFLOP/s of cuBLASLt's FP8 GEMM (kernels/cuda/fp8.h, E4M3 x E4M3 -> bf16,
//      operands quantised once: the GEMM alone) beside bf16 hg::matmul at the same n, and of an
//      FP8 linear under amp::Fp8Autocast (current scaling: both quantisations and their amax
//      reads included) -- CSV section "gemm", precisions "fp8" and "fp8_linear".
//   1c. Fused attention: milliseconds of hg::scaled_dot_product_attention (kernels/cuda/attention.cu)
//      forward, and forward + backward, at batch 1, 4 heads, T = 1024, 64 features per head, causal
//      and not, in bf16 -- CSV section "attention", metric "ms".
//   2. Training: samples/s and the step's peak memory of
//        mlp_wide: Linear 784->4096, ReLU, Linear 4096->4096, ReLU, Linear 4096->10, batch 4096
//        cnn:      hg-train's CNN (Conv 1->16 3x3 p1, ReLU, MaxPool 2, Conv 16->32 3x3 p1, ReLU,
//                  MaxPool 2, Flatten, Linear 1568->10), batch 256
//      with SGD (lr 0.01, momentum 0.9) and cross-entropy, in
//        f32       no autocast, TF32 off
//        f16_amp   Autocast(f16) + GradScaler (scaler.step_async + update: no host sync per step)
//        bf16_amp  Autocast(bf16), no scaler
//      on synthetic data made on the GPU once (hg::randn / hg::randint with a CUDA device).
//
//   build/bench/gpu_bench [--csv FILE] [--seconds S] [--only gemm|fp8|attention|train]
//
// "Step peak" is the most memory a training step held above what was live before it (parameters,
// momentum buffers, the batch): hg::memory::peak_allocated(cuda) - allocated(cuda) after a
// reset_peak at the start of the step, the largest over 3 steps. "Reserved" is what the caching
// allocator held from the driver at the end of the case (hg::memory::reserved; the cache is
// emptied between cases): step peak plus everything live plus what caching keeps. "Syncs/step"
// counts host synchronisations (hg::cuda::sync_count) over the timed steps: 0 is the goal.
// bench/gpu_torch_bench.py measures
// the same things in PyTorch; scripts/gpu-check.sh prints both side by side. Benchmarks print
// numbers, they never assert: a case that fails prints its error and the rest still run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "kernels/cuda/fp8.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The CSV (long format, shared with gpu_torch_bench.py): framework,section,case,precision,metric,value
class Csv {
 public:
  explicit Csv(const char* path) {
    if (path == nullptr) return;
    file_ = std::fopen(path, "w");
    if (file_ == nullptr) {
      std::fprintf(stderr, "gpu_bench: cannot write %s\n", path);
      return;
    }
    std::fprintf(file_, "framework,section,case,precision,metric,value\n");
    std::fflush(file_);
  }
  ~Csv() {
    if (file_ != nullptr) std::fclose(file_);
  }
  Csv(const Csv&) = delete;
  Csv& operator=(const Csv&) = delete;

  // Rows are flushed one by one, so a run stopped by a timeout keeps what it measured.
  void row(const std::string& section, const std::string& name, const std::string& precision, const std::string& metric,
           double value) {
    if (file_ == nullptr) return;
    if (std::isfinite(value)) std::fprintf(file_, "halfgrad,%s,%s,%s,%s,%.6g\n", section.c_str(), name.c_str(),
                                           precision.c_str(), metric.c_str(), value);
    else std::fprintf(file_, "halfgrad,%s,%s,%s,%s,nan\n", section.c_str(), name.c_str(), precision.c_str(), metric.c_str());
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
};

// Best (smallest) seconds per call of fn over 3 timed rounds, each of enough calls to run about
// budget/3 seconds, after two warm-up calls (cuBLASLt heuristics, workspace, allocator cache).
// The GPU is synchronized before and after each round: the time is the device's, not the launches'.
double seconds_per_call(const std::function<void()>& fn, double budget) {
  fn();
  fn();
  hg::cuda::synchronize();
  auto start = Clock::now();
  fn();
  hg::cuda::synchronize();
  const double once = std::max(1e-7, seconds_since(start));
  const int reps = std::clamp(int(budget / 3 / once), 2, 2000);
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < 3; ++round) {
    hg::cuda::synchronize();
    start = Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    hg::cuda::synchronize();
    best = std::min(best, seconds_since(start) / reps);
  }
  return best;
}

std::string short_error(const std::exception& e) {
  std::string what = e.what();
  const size_t newline = what.find('\n');
  if (newline != std::string::npos) what.resize(newline);
  if (what.size() > 160) what = what.substr(0, 157) + "...";
  return what;
}

// ---- GEMM ---------------------------------------------------------------------------------------

void gemm_table(Csv& csv, double budget) {
  const hg::Device gpu = hg::Device::cuda();
  std::printf("\n## halfgrad GEMM (hg::matmul on %s, TFLOP/s = 2n^3 / time; best of 3 rounds)\n\n", gpu.str().c_str());
  std::printf("| n x n x n | f32 (TF32 off) | f32 (TF32 on) | f16 | bf16 |\n|---|---|---|---|---|\n");
  std::fflush(stdout);
  hg::NoGradGuard no_grad;
  for (int64_t n : {4096, 8192}) {
    std::string line = "| " + std::to_string(n) + " |";
    try {
      hg::manual_seed(0);
      const hg::Tensor a32 = hg::randn({n, n}, {.device = gpu}), b32 = hg::randn({n, n}, {.device = gpu});
      struct Variant {
        const char* precision;
        hg::DType dtype;
        bool tf32;
      };
      for (const Variant& v : {Variant{"f32", hg::f32, false}, Variant{"tf32", hg::f32, true},
                               Variant{"f16", hg::f16, false}, Variant{"bf16", hg::bf16, false}}) {
        char cell[64];
        try {
          hg::cuda::allow_tf32(v.tf32);
          const hg::Tensor a = a32.to(v.dtype), b = b32.to(v.dtype);
          const double s = seconds_per_call([&] { hg::Tensor c = hg::matmul(a, b); }, budget);
          const double tflops = 2.0 * double(n) * double(n) * double(n) / s / 1e12;
          std::snprintf(cell, sizeof cell, " %.1f |", tflops);
          csv.row("gemm", std::to_string(n), v.precision, "tflops", tflops);
        } catch (const std::exception& e) {
          std::snprintf(cell, sizeof cell, " error |");
          std::fprintf(stderr, "gpu_bench: GEMM %lld %s: %s\n", (long long)n, v.precision, short_error(e).c_str());
          csv.row("gemm", std::to_string(n), v.precision, "tflops", std::nan(""));
        }
        line += cell;
        hg::cuda::allow_tf32(false);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_bench: GEMM %lld: %s\n", (long long)n, short_error(e).c_str());
      line += " error | error | error | error |";
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  hg::cuda::allow_tf32(false);
}

// ---- FP8 GEMM -------------------------------------------------------------------------------------

void fp8_table(Csv& csv, double budget) {
  const hg::Device gpu = hg::Device::cuda();
  std::printf("\n## halfgrad FP8 GEMM (cuBLASLt on %s, TFLOP/s = 2n^3 / time; best of 3 rounds)\n\n", gpu.str().c_str());
  if (!hg::kernels::cuda::fp8_gemm_supported(gpu)) {
    std::printf("(no FP8 tensor cores: compute capability below 8.9)\n");
    return;
  }
  std::printf("| n x n x n | bf16 matmul | FP8 GEMM (E4M3 -> bf16) | FP8 / bf16 | FP8 linear (quantise + GEMM) |\n"
              "|---|---|---|---|---|\n");
  std::fflush(stdout);
  hg::NoGradGuard no_grad;
  for (int64_t n : {4096, 8192}) {
    const auto tflops = [&](double s) { return 2.0 * double(n) * double(n) * double(n) / s / 1e12; };
    double bf16 = std::nan(""), fp8 = std::nan(""), linear = std::nan("");
    try {
      hg::manual_seed(0);
      const hg::Tensor a = hg::randn({n, n}, {.device = gpu}), b = hg::randn({n, n}, {.device = gpu});
      const hg::Tensor a16 = a.to(hg::bf16), b16 = b.to(hg::bf16);
      bf16 = tflops(seconds_per_call([&] { hg::Tensor c = hg::matmul(a16, b16); }, budget));
      const auto a8 = hg::kernels::cuda::fp8_quantise(a, hg::f8e4m3, 0, nullptr, false);
      const auto b8 = hg::kernels::cuda::fp8_quantise(b, hg::f8e4m3, 0, nullptr, false);  // (b as (N, K): b^T's rows)
      const hg::Tensor out = hg::empty({n, n}, {.dtype = hg::bf16, .device = gpu});
      fp8 = tflops(seconds_per_call([&] { hg::kernels::cuda::fp8_gemm(a8.codes, a8.scale_inv, b8.codes, b8.scale_inv, out, {}); },
                                    budget));
      hg::amp::Fp8State state({.scaling = hg::amp::Fp8Scaling::Current});
      linear = tflops(seconds_per_call(
          [&] {
            hg::amp::Fp8Autocast guard(state);
            hg::amp::Autocast autocast(hg::bf16);
            hg::Tensor c = hg::linear(a, b);
          },
          budget));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_bench: FP8 GEMM %lld: %s\n", (long long)n, short_error(e).c_str());
    }
    csv.row("gemm", std::to_string(n), "fp8", "tflops", fp8);
    csv.row("gemm", std::to_string(n), "fp8_linear", "tflops", linear);
    char ratio[32] = "-";
    if (std::isfinite(fp8 / bf16)) std::snprintf(ratio, sizeof ratio, "%.2fx", fp8 / bf16);
    std::printf("| %lld | %.1f | %.1f | %s | %.1f |\n", (long long)n, bf16, fp8, ratio, linear);
    std::fflush(stdout);
  }
}

// ---- training -------------------------------------------------------------------------------------

struct Model {
  const char* name;
  int64_t batch;
  hg::Shape input;  // one sample's shape
  std::function<hg::nn::Sequential()> make;
};

std::vector<Model> models() {
  using namespace hg::nn;
  return {
      {"mlp_wide", 4096, hg::Shape{784},
       [] { return hg::nn::fuse(Sequential{Linear(784, 4096), ReLU(), Linear(4096, 4096), ReLU(), Linear(4096, 10)}); }},
      // hg-train's cnn (examples/train/models.cpp), fused like it.
      {"cnn", 256, hg::Shape{1, 28, 28},
       [] {
         return hg::nn::fuse(Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, {.padding = 1}),
                                ReLU(), MaxPool2d(2), Flatten(), Linear(32 * 7 * 7, 10)});
       }},
  };
}

struct TrainResult {
  double samples_per_s = std::nan("");
  double step_ms = std::nan("");
  double step_peak_mib = std::nan("");
  double reserved_mib = std::nan("");
  double syncs_per_step = std::nan("");
  int steps = 0;
};

TrainResult train_one(const Model& m, const std::string& precision, double budget) {
  const hg::Device gpu = hg::Device::cuda();
  hg::cuda::allow_tf32(false);
  hg::manual_seed(0);
  hg::nn::Sequential model = m.make();
  model.to(gpu);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const bool autocast = precision != "f32";
  const hg::DType autocast_dtype = precision == "bf16_amp" ? hg::bf16 : hg::f16;
  hg::amp::GradScaler scaler({.enabled = precision == "f16_amp"});

  std::vector<int64_t> dims{m.batch};
  for (int64_t d : m.input) dims.push_back(d);
  const hg::Tensor x = hg::randn(hg::Shape(dims), {.device = gpu});
  const hg::Tensor y = hg::randint(0, 10, {m.batch}, {.dtype = hg::i64, .device = gpu});

  // One step after zero_grad, exactly as hg-train runs it on a GPU: nothing reads a device value.
  const auto body = [&] {
    hg::Tensor loss;
    {
      hg::amp::Autocast ac(autocast_dtype, autocast);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step_async(opt);
    scaler.update();
  };
  const auto step = [&] {
    opt.zero_grad();
    body();
  };

  TrainResult r;
  for (int i = 0; i < 5; ++i) step();  // warm-up: momentum buffers, algorithm caches, allocator
  hg::cuda::synchronize();
  auto start = Clock::now();
  for (int i = 0; i < 3; ++i) step();
  hg::cuda::synchronize();
  const double once = std::max(1e-6, seconds_since(start) / 3);
  r.steps = std::clamp(int(budget / 2 / once), 5, 5000);
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < 2; ++round) {
    hg::cuda::synchronize();
    start = Clock::now();
    const int64_t syncs_before = hg::cuda::sync_count();
    for (int i = 0; i < r.steps; ++i) step();
    r.syncs_per_step = double(hg::cuda::sync_count() - syncs_before) / r.steps;
    hg::cuda::synchronize();
    best = std::min(best, seconds_since(start) / r.steps);
  }
  r.step_ms = 1e3 * best;
  r.samples_per_s = double(m.batch) / best;

  // The step's peak above what was live before it (parameters, momentum, the batch).
  int64_t peak = 0;
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    hg::cuda::synchronize();
    const int64_t before = hg::memory::allocated(gpu);
    hg::memory::reset_peak(gpu);
    body();
    hg::cuda::synchronize();
    peak = std::max(peak, hg::memory::peak_allocated(gpu) - before);
  }
  r.step_peak_mib = double(peak) / (1024.0 * 1024.0);
  r.reserved_mib = double(hg::memory::reserved(gpu)) / (1024.0 * 1024.0);
  return r;
}

void train_table(Csv& csv, double budget) {
  std::printf("\n## halfgrad training (SGD momentum 0.9, cross-entropy, synthetic data on the GPU; best of 2 rounds)\n\n");
  std::printf("| model | batch | precision | samples/s | step ms | x f32 speed | step peak MiB | x f32 peak | reserved MiB | "
              "syncs/step |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (const Model& m : models()) {
    TrainResult f32;
    for (const std::string precision : {"f32", "f16_amp", "bf16_amp"}) {
      TrainResult r;
      try {
        r = train_one(m, precision, budget);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_bench: train %s %s: %s\n", m.name, precision.c_str(), short_error(e).c_str());
      }
      if (precision == "f32") f32 = r;
      csv.row("train", m.name, precision, "samples_per_s", r.samples_per_s);
      csv.row("train", m.name, precision, "step_peak_mib", r.step_peak_mib);
      csv.row("train", m.name, precision, "reserved_mib", r.reserved_mib);
      csv.row("train", m.name, precision, "syncs_per_step", r.syncs_per_step);
      std::printf("| %s | %lld | %s | %.0f | %.3f | %.2fx | %.1f | %.2fx | %.1f | %.2f |\n", m.name, (long long)m.batch,
                  precision.c_str(), r.samples_per_s, r.step_ms, r.samples_per_s / f32.samples_per_s, r.step_peak_mib,
                  r.step_peak_mib / f32.step_peak_mib, r.reserved_mib, r.syncs_per_step);
      std::fflush(stdout);
      hg::memory::empty_cache(hg::Device::cuda());
    }
  }
}

// ---- fused attention ----------------------------------------------------------------------------

void attention_table(Csv& csv, double budget) {
  const hg::Device gpu = hg::Device::cuda();
  constexpr int64_t kHeads = 4, kT = 1024, kD = 64;
  std::printf("\n## halfgrad fused attention (scaled_dot_product_attention, bf16, 1 x %lld heads x T %lld x D %lld, "
              "ms per call)\n\n| mask | forward | forward + backward |\n|---|---|---|\n",
              (long long)kHeads, (long long)kT, (long long)kD);
  for (bool causal : {false, true}) {
    const char* name = causal ? "causal" : "none";
    try {
      hg::manual_seed(0);
      const auto input = [&] { return hg::randn({1, kHeads, kT, kD}, {.device = gpu}).to(hg::bf16).requires_grad_(); };
      const hg::Tensor q = input(), k = input(), v = input();
      const hg::Tensor grad = hg::randn({1, kHeads, kT, kD}, {.device = gpu}).to(hg::bf16);
      const hg::ScaledDotProductAttentionOptions options{.is_causal = causal};
      const double forward = seconds_per_call([&] {
        hg::NoGradGuard no_grad;
        hg::Tensor out = hg::scaled_dot_product_attention(q, k, v, options);
      }, budget);
      const double both = seconds_per_call([&] {
        hg::scaled_dot_product_attention(q, k, v, options).backward(grad);
      }, budget);
      std::printf("| %s | %.3f | %.3f |\n", name, forward * 1e3, both * 1e3);
      csv.row("attention", name, "bf16", "forward_ms", forward * 1e3);
      csv.row("attention", name, "bf16", "forward_backward_ms", both * 1e3);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpu_bench: attention %s: %s\n", name, short_error(e).c_str());
      std::printf("| %s | error | error |\n", name);
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  double budget = 1.0;  // seconds of timed work per measurement
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--csv") == 0 && has_value) csv_path = argv[++i];
    else if (std::strcmp(argv[i], "--seconds") == 0 && has_value) budget = std::max(0.05, std::atof(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && has_value) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: gpu_bench [--csv FILE] [--seconds S] [--only gemm|fp8|attention|train]\n");
      return 2;
    }
  }
  Csv csv(csv_path);  // the header is written even without a device, so readers find a valid file
  if (!hg::cuda::is_available()) {
    std::printf("gpu_bench: no CUDA device (%s); nothing to measure\n",
                hg::cuda::built_with_cuda() ? "built with CUDA, but no usable device or driver" : "CPU-only build");
    return 0;
  }
  try {
    std::printf("gpu_bench: halfgrad on %s, %d CUDA device(s)\n", hg::Device::cuda().str().c_str(), hg::cuda::device_count());
    if (only.empty() || only == "gemm") gemm_table(csv, budget / 2);
    if (only.empty() || only == "fp8") fp8_table(csv, budget / 2);
    if (only.empty() || only == "attention") attention_table(csv, budget / 2);
    if (only.empty() || only == "train") train_table(csv, budget);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
