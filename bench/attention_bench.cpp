// attention_bench: causal self-attention forward + backward, halfgrad's fused
// scaled_dot_product_attention against the naive composition softmax(q k^T * scale + mask) v (the
// T x T matrix materialised, as without a fused kernel): time per step and the step's peak memory
// (hg::memory's counters, beyond the inputs) at T = 256, 1024 and 4096. The fused kernel's peak
// grows linearly in T, the naive one's quadratically. bench/py/attention_bench.py times PyTorch
// 2.x's F.scaled_dot_product_attention on the same shapes. "fused MHA ms" times the fused op on
// the layout nn::MultiheadAttention gives it: q, k, v [1, H, T, D] views of one [1, T, 3 * H * D]
// projection, the output merged back to [1, T, H * D] (read in place, no copies; kernels/attention.h).
//
//   build/bench/attention_bench [--threads N] [--heads H] [--dim D] [--lengths 256,1024,4096]
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench_util.h"
#include "halfgrad.h"

namespace {

using hg::Tensor;

Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t T = q.shape()[2];
  const Tensor scores = hg::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(q.shape()[3])));
  const Tensor future = hg::triu(hg::ones({T, T}, {.dtype = hg::u8}), 1);
  return hg::matmul(hg::softmax(hg::masked_fill(scores, future, -std::numeric_limits<double>::infinity()), -1), v);
}

// Forward + backward of the fused op on head views of one projection, merged back: ms per step.
double measure_head_views(int64_t heads, int64_t T, int64_t D, hg::DType dtype) {
  hg::manual_seed(1);
  const int64_t E = heads * D;
  const Tensor projection = hg::randn({1, T, 3 * E}).to(dtype).requires_grad_(true);
  const Tensor grad = hg::randn({1, T, E}).to(dtype);
  auto step = [&] {
    projection.set_grad(Tensor());
    const std::vector<Tensor> qkv = hg::chunk(projection, 3, -1);
    auto head = [&](const Tensor& t) { return t.reshape({1, T, heads, D}).transpose(1, 2); };
    const Tensor out = hg::scaled_dot_product_attention(head(qkv[0]), head(qkv[1]), head(qkv[2]), {.is_causal = true});
    out.transpose(1, 2).reshape({1, T, E}).backward(grad);
  };
  step();
  return hg_bench::time_it(step, T >= 4096 ? 2.0 : 0.5) * 1e3;
}

struct Measured {
  double ms;
  double peak_mib;
};

Measured measure(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attention, int64_t heads,
                 int64_t T, int64_t D, hg::DType dtype) {
  hg::manual_seed(1);
  auto input = [&] { return hg::randn({1, heads, T, D}).to(dtype).requires_grad_(true); };
  const Tensor q = input(), k = input(), v = input();
  const Tensor grad = hg::randn({1, heads, T, D}).to(dtype);
  auto step = [&] {
    for (const Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    attention(q, k, v).backward(grad);
  };
  step();
  const int64_t base = hg::memory::allocated();
  hg::memory::reset_peak();
  step();
  const double peak = double(hg::memory::peak_allocated() - base) / (1 << 20);
  const double budget = T >= 4096 ? 2.0 : 0.5;
  return {hg_bench::time_it(step, budget) * 1e3, peak};
}

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> out;
  for (const char* p = text; *p;) {
    out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  int64_t heads = 4, D = 32;
  std::vector<int64_t> lengths{256, 1024, 4096};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--heads")) heads = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dim")) D = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lengths")) lengths = parse_list(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: attention_bench [--threads N] [--heads H] [--dim D] [--lengths 256,1024]\n");
      return 2;
    }
  }
  hg::set_num_threads(threads);
  std::printf("attention_bench: causal self-attention forward + backward, batch 1, %lld heads, head dim %lld, %d "
              "thread(s), CPU level %s\n\n",
              (long long)heads, (long long)D, threads, hg::cpu::isa_name(hg::cpu::isa()));
  std::printf("| T | dtype | fused ms | fused MHA ms | naive ms | naive / fused | fused peak MiB | naive peak MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const auto fused = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return hg::scaled_dot_product_attention(q, k, v, {.is_causal = true});
  };
  for (int64_t T : lengths)
    for (hg::DType dtype : {hg::f32, hg::bf16}) {
      try {
        const Measured f = measure(fused, heads, T, D, dtype), n = measure(naive_attention, heads, T, D, dtype);
        const double mha = measure_head_views(heads, T, D, dtype);
        std::printf("| %lld | %s | %.2f | %.2f | %.2f | %.2fx | %.1f | %.1f |\n", (long long)T,
                    std::string(hg::dtype_name(dtype)).c_str(), f.ms, mha, n.ms, n.ms / f.ms, f.peak_mib, n.peak_mib);
      } catch (const std::exception& e) {
        std::printf("| %lld | %s | error: %s |\n", (long long)T, std::string(hg::dtype_name(dtype)).c_str(), e.what());
      }
      std::fflush(stdout);
    }
  return 0;
}
