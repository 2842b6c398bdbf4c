// The CUDA suite: every op of API.md's "ops" run on the CPU and on hg::Device::cuda() with the same
// inputs in f32, f16 and bf16 (output and every input gradient compared); the GPU variants of
// TESTING.md's scenarios 5, 9, 10, 12, 21 and 25; the caching allocator's counters; the optimizers'
// multi-tensor kernels. Every case skips itself without a GPU (CPU-only builds and GPU-less
// machines report them as skipped); scripts/gpu-check.sh runs them on one.
//
// Tolerances: T(dtype) (hg_test::tolerance_for) unless a case names one of these documented
// exceptions (PyTorch's own CPU-vs-CUDA test, test_compare_cpu, allows 1e-3 for every op):
//   Gemm   matmul/linear: cuBLASLt sums the K products in another order than the CPU GEMM. With
//          TF32 off, f32 differs by f32 rounding over K terms (rtol 1e-5, atol 5e-5). 16-bit
//          results are rounded once from f32 accumulators on both sides, so they differ by one
//          16-bit rounding, or two where a gradient sums rounded partial products.
//   Conv   conv2d: as Gemm, but cuDNN may pick Winograd/FFT algorithms (f32: 1e-4) and adds the
//          bias to the already rounded 16-bit output (a second rounding).
//   Saved  16-bit backwards that read the forward's rounded output (exp, sigmoid, tanh, softmax,
//          log_softmax): CUDA's expf/tanhf/logf differ from the CPU's by an f32 ulp or two, which
//          now and then moves that saved output by one 16-bit ulp, and the backward carries it
//          (amplified where it computes 1 - y near y = 1). f32 keeps T(f32) here.
//   16-bit values of every exception: 2 * rtol, atol two 16-bit ulps at magnitude 1.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

using hg::Tensor;
namespace amp = hg::amp;
namespace nn = hg::nn;
namespace optim = hg::optim;

#define SKIP_WITHOUT_GPU doctest::skip(!hg_test::cuda_available())
// An op under test: a lambda of the inputs `in`, prepared for the device by check_op.
#define OP(...) [](const std::vector<Tensor>& in) -> Tensor { return __VA_ARGS__; }

namespace {

const hg::Device kCpu = hg::Device::cpu();
hg::Device gpu() { return hg::Device::cuda(); }
constexpr hg::DType kFloatTypes[] = {hg::f32, hg::f16, hg::bf16};
constexpr uint64_t kOpSeed = 1234, kGradSeed = 4321;

std::string name_of(hg::DType dtype) { return std::string(hg::dtype_name(dtype)); }

// ---- tolerances (see the top of the file) -------------------------------------------------------

enum class Tol { T, Gemm, Conv, Saved };

hg_test::Tolerance tolerance(Tol kind, hg::DType dtype) {
  const hg_test::Tolerance t = hg_test::tolerance_for(dtype);
  if (kind == Tol::T) return t;
  if (dtype == hg::f32) return kind == Tol::Gemm ? hg_test::Tolerance{1e-5, 5e-5}
                               : kind == Tol::Conv ? hg_test::Tolerance{1e-4, 1e-4} : t;
  if (!hg::is_16bit_floating(dtype)) return t;
  const double ulp_at_one = dtype == hg::f16 ? 0x1p-10 : 0x1p-7;
  return {2 * t.rtol, 2 * ulp_at_one};
}

void expect_close(const Tensor& actual, const Tensor& expected, hg_test::Tolerance tol, const std::string& what) {
  INFO(what);
  const auto report = hg_test::compare(actual.to(kCpu), expected.to(kCpu), tol);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
}

// ---- RAII switches ----------------------------------------------------------------------------------

struct Tf32Scope {  // f32 GEMMs/convs in full f32 unless a test asks for TF32
  bool previous = hg::cuda::tf32_allowed();
  explicit Tf32Scope(bool allow) { hg::cuda::allow_tf32(allow); }
  ~Tf32Scope() { hg::cuda::allow_tf32(previous); }
};

struct DeterministicScope {
  bool previous = hg::are_deterministic_algorithms_enabled();
  explicit DeterministicScope(bool on) { hg::use_deterministic_algorithms(on); }
  ~DeterministicScope() { hg::use_deterministic_algorithms(previous); }
};

// ---- one op on both devices -------------------------------------------------------------------------

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

struct Run {
  std::vector<Tensor> inputs;  // what the op received, on the run's device
  Tensor out;
};

struct Expect {
  Tol forward = Tol::T;
  Tol backward = Tol::T;
  std::vector<size_t> buffers = {};  // floating inputs that must not require grad (running stats)
};

// The inputs on `device`: floating ones converted to `dtype`, each a fresh leaf that requires grad
// (unless a buffer); integer ones (targets, indices) as they are; undefined ones pass through.
Run forward_on(hg::Device device, hg::DType dtype, const std::vector<Tensor>& inputs, const Op& op, const Expect& e) {
  Run run;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i];
    if (x.defined()) {
      const bool floating = hg::is_floating(x.dtype());
      x = (floating ? x.detach().to(dtype) : x.detach()).to(device).clone();
      if (floating && std::find(e.buffers.begin(), e.buffers.end(), i) == e.buffers.end()) x.requires_grad_();
    }
    run.inputs.push_back(x);
  }
  hg::manual_seed(kOpSeed);  // the same dropout mask on both devices
  run.out = op(run.inputs);
  return run;
}

// Runs `op` on the CPU and on the GPU, backward with one random output gradient, and compares the
// output and every input gradient. Returns both runs for further checks.
std::pair<Run, Run> check_op(const std::string& name, hg::DType dtype, const std::vector<Tensor>& inputs, const Op& op,
                             const Expect& e = {}) {
  const std::string label = name + " in " + name_of(dtype);
  INFO(label);
  Run cpu = forward_on(kCpu, dtype, inputs, op, e);
  Run cuda = forward_on(gpu(), dtype, inputs, op, e);
  CHECK(cuda.out.device() == gpu());
  expect_close(cuda.out, cpu.out, tolerance(e.forward, cpu.out.dtype()), label + ": forward");
  if (!cpu.out.requires_grad()) return {cpu, cuda};
  hg::manual_seed(kGradSeed);
  const Tensor g = hg::randn(cpu.out.shape()).to(cpu.out.dtype());
  cpu.out.backward(g);
  cuda.out.backward(g.to(gpu()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu.inputs[i].defined() || !cpu.inputs[i].requires_grad()) continue;
    const Tensor expected = cpu.inputs[i].grad(), actual = cuda.inputs[i].grad();
    const std::string what = label + ": gradient of input " + std::to_string(i);
    CHECK_MESSAGE(expected.defined() == actual.defined(), what);
    if (!expected.defined() || !actual.defined()) continue;
    CHECK(actual.device() == gpu());
    expect_close(actual, expected, tolerance(e.backward, expected.dtype()), what);
  }
  return {cpu, cuda};
}

Tensor i64_tensor(const std::vector<int64_t>& values, hg::Shape shape) {
  return hg::from_vector(values, std::move(shape));
}

}  // namespace

// ---- elementwise, activations, reductions -------------------------------------------------------------

TEST_CASE("cuda.elementwise_ops_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(1);
  const Tensor a = hg::randn({4, 5}), row = hg::randn({5}), col = hg::randn({4, 1});
  const Tensor pos = hg::rand({4, 5}) + 0.5, pos_row = hg::rand({5}) + 0.5;
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("add (broadcast)", dt, {a, row}, OP(hg::add(in[0], in[1])));
    check_op("sub (broadcast)", dt, {a, col}, OP(hg::sub(in[0], in[1])));
    check_op("mul (broadcast)", dt, {a, row}, OP(hg::mul(in[0], in[1])));
    check_op("div (broadcast)", dt, {a, pos_row}, OP(hg::div(in[0], in[1])));
    check_op("operators + - * /", dt, {a, pos}, OP((in[0] + in[1]) * (in[0] - in[1]) / in[1]));
    check_op("add scalar", dt, {a}, OP(hg::add(in[0], 1.5)));
    check_op("sub scalar", dt, {a}, OP(hg::sub(in[0], 0.25)));
    check_op("mul scalar", dt, {a}, OP(hg::mul(in[0], -3.0)));
    check_op("div scalar", dt, {a}, OP(hg::div(in[0], 4.0)));
    check_op("scalar - tensor", dt, {a}, OP(2.0 - in[0]));
    check_op("scalar / tensor", dt, {pos}, OP(2.0 / in[0]));  // pow(x, -1) * 2: kept apart from sums
    check_op("neg", dt, {a}, OP(hg::neg(in[0])));
    check_op("exp", dt, {a}, OP(hg::exp(in[0])), {.backward = Tol::Saved});
    check_op("log", dt, {pos}, OP(hg::log(in[0])));
    check_op("sqrt", dt, {pos}, OP(hg::sqrt(in[0])));
    check_op("pow 2", dt, {a}, OP(hg::pow(in[0], 2.0)));
    check_op("pow 1.5", dt, {pos}, OP(hg::pow(in[0], 1.5)));
    check_op("pow -0.5", dt, {pos}, OP(hg::pow(in[0], -0.5)));
    check_op("abs", dt, {a}, OP(hg::abs(in[0])));
    check_op("clamp", dt, {a}, OP(hg::clamp(in[0], -0.5, 0.7)));
  }
}

TEST_CASE("cuda.activations_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(2);
  const Tensor x = hg::randn({6, 7}) * 2.0;
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("relu", dt, {x}, OP(hg::relu(in[0])));
    check_op("gelu", dt, {x}, OP(hg::gelu(in[0])));
    check_op("silu", dt, {x}, OP(hg::silu(in[0])));
    check_op("sigmoid", dt, {x}, OP(hg::sigmoid(in[0])), {.backward = Tol::Saved});
    check_op("tanh", dt, {x}, OP(hg::tanh(in[0])), {.backward = Tol::Saved});
  }
}

// Sums accumulate in double on both devices and round once, so T(dtype) holds for them too.
TEST_CASE("cuda.reductions_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(3);
  const Tensor x = hg::randn({4, 5, 6});
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("sum", dt, {x}, OP(hg::sum(in[0])));
    check_op("sum dim 1", dt, {x}, OP(hg::sum(in[0], {1})));
    check_op("sum dims 0, 2 keepdim", dt, {x}, OP(hg::sum(in[0], {0, 2}, true)));
    check_op("mean", dt, {x}, OP(hg::mean(in[0])));
    check_op("mean dim -1 keepdim", dt, {x}, OP(hg::mean(in[0], {-1}, true)));
    check_op("mean dims 0, 1", dt, {x}, OP(hg::mean(in[0], {0, 1})));
    check_op("amax dim 1", dt, {x}, OP(hg::amax(in[0], 1)));
    check_op("amax dim -1 keepdim", dt, {x}, OP(hg::amax(in[0], -1, true)));
    check_op("argmax dim 2", dt, {x}, OP(hg::argmax(in[0], 2)));
    check_op("argmax dim 0", dt, {x}, OP(hg::argmax(in[0], 0)));
  }
}

// ---- matmul, linear, conv -----------------------------------------------------------------------------

TEST_CASE("cuda.matmul_matches_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  hg::manual_seed(4);
  const auto r = [](hg::Shape s) { return hg::randn(std::move(s)) * 0.5; };
  const Tensor m57 = r({5, 7}), m73 = r({7, 3}), m74 = r({7, 4}), m75 = r({7, 5}), m37 = r({3, 7});
  const Tensor b357 = r({3, 5, 7}), b374 = r({3, 7, 4}), b375 = r({3, 7, 5}), b347 = r({3, 4, 7}), b157 = r({1, 5, 7});
  const Tensor wide_a = r({16, 24}), wide_b = r({24, 8});
  const Expect gemm{.forward = Tol::Gemm, .backward = Tol::Gemm};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("2-D", dt, {m57, m73}, OP(hg::matmul(in[0], in[1])), gemm);
    check_op("3-D", dt, {b357, b374}, OP(hg::matmul(in[0], in[1])), gemm);
    check_op("3-D @ 2-D", dt, {b357, m74}, OP(hg::matmul(in[0], in[1])), gemm);
    check_op("2-D @ 3-D", dt, {m57, b374}, OP(hg::matmul(in[0], in[1])), gemm);
    check_op("batch 1 broadcast", dt, {b157, b374}, OP(hg::matmul(in[0], in[1])), gemm);
    check_op("transposed 2-D operands", dt, {m75, m37}, OP(hg::matmul(in[0].t(), in[1].t())), gemm);
    check_op("transposed 3-D operands", dt, {b375, b347},
             OP(hg::matmul(in[0].transpose(1, 2), in[1].transpose(1, 2))), gemm);
    check_op("tensor-core sizes", dt, {wide_a, wide_b}, OP(hg::matmul(in[0], in[1])), gemm);
    const auto [cpu, cuda] =
        check_op("K = 0", dt, {hg::randn({5, 0}), hg::randn({0, 3})}, OP(hg::matmul(in[0], in[1])));
    CHECK(hg::sum(hg::abs(cuda.out)).item<double>() == 0.0);  // zeros, not garbage (pytorch#31421)
  }
}

TEST_CASE("cuda.linear_and_linear_relu_match_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  hg::manual_seed(5);
  const Tensor x = hg::randn({6, 10}), x3 = hg::randn({2, 3, 10}), w = hg::randn({7, 10}) * 0.3, b = hg::randn({7});
  const Tensor xb = hg::randn({16, 32}), wb = hg::randn({24, 32}) * 0.2, bb = hg::randn({24});
  const Expect gemm{.forward = Tol::Gemm, .backward = Tol::Gemm};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("linear", dt, {x, w, b}, OP(hg::linear(in[0], in[1], in[2])), gemm);
    check_op("linear without bias", dt, {x, w}, OP(hg::linear(in[0], in[1])), gemm);
    check_op("linear 3-D input", dt, {x3, w, b}, OP(hg::linear(in[0], in[1], in[2])), gemm);
    check_op("linear tensor-core sizes", dt, {xb, wb, bb}, OP(hg::linear(in[0], in[1], in[2])), gemm);
    check_op("linear_relu", dt, {x, w, b}, OP(hg::linear_relu(in[0], in[1], in[2])), gemm);
    check_op("linear_relu without bias", dt, {x, w}, OP(hg::linear_relu(in[0], in[1])), gemm);
    check_op("linear_relu 3-D input", dt, {x3, w, b}, OP(hg::linear_relu(in[0], in[1], in[2])), gemm);
    check_op("linear_relu tensor-core sizes", dt, {xb, wb, bb}, OP(hg::linear_relu(in[0], in[1], in[2])), gemm);
  }
}

TEST_CASE("cuda.conv2d_and_conv2d_relu_match_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  hg::manual_seed(6);
  // Weights scaled by 1/sqrt(fan_in): outputs of order 1, like an initialised layer.
  const Tensor x = hg::randn({2, 3, 7, 6}), w = hg::randn({4, 3, 3, 3}) / std::sqrt(27.0), b = hg::randn({4}) * 0.5;
  const Tensor x1 = hg::randn({2, 4, 5, 5}), w1 = hg::randn({3, 4, 1, 1}) * 0.5, b1 = hg::randn({3}) * 0.5;
  const Expect conv{.forward = Tol::Conv, .backward = Tol::Conv};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("conv2d", dt, {x, w, b}, OP(hg::conv2d(in[0], in[1], in[2])), conv);
    check_op("conv2d stride 2 padding 1", dt, {x, w, b},
             OP(hg::conv2d(in[0], in[1], in[2], {.stride = 2, .padding = 1})), conv);
    check_op("conv2d padding 1 without bias", dt, {x, w},
             OP(hg::conv2d(in[0], in[1], {}, {.stride = 1, .padding = 1})), conv);
    check_op("conv2d 1x1", dt, {x1, w1, b1}, OP(hg::conv2d(in[0], in[1], in[2])), conv);
    check_op("conv2d_relu padding 1", dt, {x, w, b},
             OP(hg::conv2d_relu(in[0], in[1], in[2], {.stride = 1, .padding = 1})), conv);
    check_op("conv2d_relu stride 2 without bias", dt, {x, w},
             OP(hg::conv2d_relu(in[0], in[1], {}, {.stride = 2, .padding = 0})), conv);
  }
}

// Scenario 5 on the GPU: zero-size inputs give the CPU's (empty or zero) results and gradients.
TEST_CASE("cuda.zero_size_inputs_match_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  hg::manual_seed(22);
  const Tensor none = hg::randn({0, 10}), w = hg::randn({7, 10}), b = hg::randn({7}), m = hg::randn({10, 3});
  const Tensor images = hg::randn({0, 3, 5, 5}), k = hg::randn({4, 3, 3, 3}), kb = hg::randn({4});
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("matmul M = 0", dt, {none, m}, OP(hg::matmul(in[0], in[1])));
    check_op("sum over an empty dim", dt, {none}, OP(hg::sum(in[0], {0})));
    check_op("softmax of no rows", dt, {none}, OP(hg::softmax(in[0], 1)));
    check_op("conv2d of an empty batch", dt, {images, k, kb}, OP(hg::conv2d(in[0], in[1], in[2])));
    check_op("linear of an empty batch", dt, {none, w, b}, OP(hg::linear(in[0], in[1], in[2])));
    check_op("linear_relu of an empty batch", dt, {none, w}, OP(hg::linear_relu(in[0], in[1])));
  }
}

// TF32 (off by default) is a real switch: f32 products then carry ~1e-3 relative error, and both
// cuBLASLt and cuDNN still run.
TEST_CASE("cuda.tf32_switch_keeps_f32_matmul_and_conv_within_tf32_precision" * SKIP_WITHOUT_GPU) {
  const Tf32Scope tf32(true);
  CHECK(hg::cuda::tf32_allowed());
  hg::manual_seed(7);
  const Tensor a = hg::randn({64, 64}) * 0.125, b = hg::randn({64, 64}) * 0.125;
  const Tensor x = hg::randn({2, 8, 9, 9}), w = hg::randn({8, 8, 3, 3}) / std::sqrt(72.0);
  expect_close(hg::matmul(a.to(gpu()), b.to(gpu())), hg::matmul(a, b), {1e-2, 1e-3}, "matmul with TF32");
  expect_close(hg::conv2d(x.to(gpu()), w.to(gpu())), hg::conv2d(x, w), {1e-2, 5e-3}, "conv2d with TF32");
}

// ---- softmax, losses, pooling, normalisation ------------------------------------------------------

TEST_CASE("cuda.softmax_and_log_softmax_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(8);
  const Tensor rows = hg::randn({5, 37}) * 2.0, wide = hg::randn({3, 70}) * 2.0, x3 = hg::randn({4, 6, 5}) * 2.0;
  const Expect saved{.backward = Tol::Saved};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("softmax rows", dt, {rows}, OP(hg::softmax(in[0], 1)), saved);
    check_op("log_softmax rows", dt, {rows}, OP(hg::log_softmax(in[0], -1)), saved);
    check_op("softmax wide rows", dt, {wide}, OP(hg::softmax(in[0], 1)), saved);
    check_op("softmax dim 0 (strided lines)", dt, {rows}, OP(hg::softmax(in[0], 0)), saved);
    check_op("log_softmax middle dim", dt, {x3}, OP(hg::log_softmax(in[0], 1)), saved);
  }
}

TEST_CASE("cuda.cross_entropy_and_mse_loss_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(9);
  const Tensor logits = hg::randn({9, 7}) * 2.0, a = hg::randn({4, 6}), b = hg::randn({4, 6});
  const Tensor targets = i64_tensor({0, 6, 3, -100, 2, 5, 1, -100, 4}, {9});
  const Tensor with_threes = i64_tensor({3, 6, 3, 0, 2, 5, 1, 3, 4}, {9});
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("cross_entropy (ignore_index -100)", dt, {logits, targets}, OP(hg::cross_entropy(in[0], in[1])));
    check_op("cross_entropy label smoothing", dt, {logits, targets},
             OP(hg::cross_entropy(in[0], in[1], {.label_smoothing = 0.1})));
    check_op("cross_entropy label smoothing, ignore_index 3", dt, {logits, with_threes},
             OP(hg::cross_entropy(in[0], in[1], {.label_smoothing = 0.2, .ignore_index = 3})));
    check_op("mse_loss", dt, {a, b}, OP(hg::mse_loss(in[0], in[1])));
  }
}

TEST_CASE("cuda.pooling_matches_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(10);
  const Tensor x = hg::randn({2, 3, 8, 7});
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("max_pool2d 2/2", dt, {x}, OP(hg::max_pool2d(in[0], 2, 2)));
    check_op("max_pool2d 3/2 (overlapping)", dt, {x}, OP(hg::max_pool2d(in[0], 3, 2)));
    check_op("max_pool2d 3/1 (overlapping)", dt, {x}, OP(hg::max_pool2d(in[0], 3, 1)));
    check_op("avg_pool2d 2/2", dt, {x}, OP(hg::avg_pool2d(in[0], 2, 2)));
    check_op("avg_pool2d 3/2 (overlapping)", dt, {x}, OP(hg::avg_pool2d(in[0], 3, 2)));
    check_op("avg_pool2d 3/1 (overlapping)", dt, {x}, OP(hg::avg_pool2d(in[0], 3, 1)));
  }
}

TEST_CASE("cuda.batch_norm_matches_cpu_and_updates_running_stats_on_the_device" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(11);
  const Tensor x = hg::randn({4, 3, 5, 5}) * 2.0 + 0.5, x2 = hg::randn({8, 3}) * 1.5 - 0.25;
  const Tensor w = hg::randn({3}) * 0.2 + 1.0, b = hg::randn({3}) * 0.3;
  const Tensor running_mean = hg::randn({3}) * 0.1, running_var = hg::rand({3}) * 0.5 + 1.0;
  // Inputs 3 and 4 are the running statistics: buffers, updated in place by a training forward.
  const Expect stats{.buffers = {3, 4}};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    for (const Tensor& input : {x, x2}) {
      const auto [cpu, cuda] = check_op("batch_norm training", dt, {input, w, b, running_mean, running_var},
                                        OP(hg::batch_norm(in[0], in[3], in[4], in[1], in[2], true, 0.1, 1e-5)), stats);
      for (const auto& [i, initial] : {std::pair{size_t(3), running_mean}, std::pair{size_t(4), running_var}}) {
        const std::string what = i == 3 ? "running_mean" : "running_var";
        CHECK(cuda.inputs[i].device() == gpu());
        CHECK_MESSAGE(cuda.inputs[i].to(kCpu).to_vector<float>() != initial.to(dt).to_vector<float>(), what);
        expect_close(cuda.inputs[i], cpu.inputs[i], hg_test::tolerance_for(dt), what);
      }
      check_op("batch_norm eval", dt, {input, w, b, running_mean, running_var},
               OP(hg::batch_norm(in[0], in[3], in[4], in[1], in[2], false, 0.1, 1e-5)), stats);
      check_op("batch_norm training, no affine or running stats", dt, {input},
               OP(hg::batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5)));
    }
  }
}

TEST_CASE("cuda.layer_norm_matches_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(12);
  const Tensor x = hg::randn({4, 6, 10}) * 1.5 + 0.3, w = hg::randn({10}) * 0.2 + 1.0, b = hg::randn({10}) * 0.3;
  const Tensor wide = hg::randn({3, 300}) + 0.5, ww = hg::randn({300}) * 0.2 + 1.0, bw = hg::randn({300}) * 0.3;
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("layer_norm", dt, {x, w, b}, OP(hg::layer_norm(in[0], {10}, in[1], in[2], 1e-5)));
    check_op("layer_norm 2-D shape without affine", dt, {x}, OP(hg::layer_norm(in[0], {6, 10}, {}, {}, 1e-5)));
    check_op("layer_norm D = 300", dt, {wide, ww, bw}, OP(hg::layer_norm(in[0], {300}, in[1], in[2], 1e-5)));
  }
}

// ---- dropout, embedding, shape ops and casts ----------------------------------------------------------

// The Philox mask is a function of (seed, offset, element): for the same manual_seed the GPU drops
// exactly the elements the CPU drops (check_op seeds both forwards alike).
TEST_CASE("cuda.dropout_mask_is_bitwise_the_cpu_mask" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(13);
  const Tensor x = hg::rand({37, 53}) + 1.0;  // no zeros of its own
  const auto zeros_of = [](const Tensor& t) {
    std::vector<bool> mask;
    for (float v : t.to(kCpu).to_vector<float>()) mask.push_back(v == 0.0f);
    return mask;
  };
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    const auto [cpu, cuda] = check_op("dropout", dt, {x}, OP(hg::dropout(in[0], 0.3, true)));
    const std::vector<bool> mask = zeros_of(cpu.out);
    CHECK(zeros_of(cuda.out) == mask);
    CHECK(zeros_of(cuda.inputs[0].grad()) == mask);  // the backward regenerates the same mask
    const double dropped = double(std::count(mask.begin(), mask.end(), true)) / double(mask.size());
    CHECK(dropped > 0.2);
    CHECK(dropped < 0.4);
    check_op("dropout eval", dt, {x}, OP(hg::dropout(in[0], 0.3, false) * 1.0));
  }
}

TEST_CASE("cuda.embedding_matches_cpu_and_its_backward_refuses_in_deterministic_mode" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(14);
  const Tensor w = hg::randn({10, 6});
  const Tensor indices = i64_tensor({1, 4, 1, 9, 0, 4}, {2, 3});  // rows 1 and 4 twice: two atomic adds each
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    const DeterministicScope off(false);
    check_op("embedding", dt, {indices, w}, OP(hg::embedding(in[0], in[1])));
  }
  SUBCASE("deterministic mode") {
    const DeterministicScope on(true);
    const Tensor wg = w.to(gpu()).requires_grad_();
    const Tensor out = hg::embedding(indices.to(gpu()), wg);  // the forward has no atomics: it runs
    expect_close(out, hg::embedding(indices, w), hg_test::tolerance_for(hg::f32), "embedding forward");
    CHECK_THROWS_HG(hg::sum(out).backward(), "embedding");
  }
}

TEST_CASE("cuda.cat_casts_and_contiguous_copies_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(15);
  const Tensor a = hg::randn({2, 3}), b = hg::randn({4, 3}), c = hg::randn({2, 5});
  const Tensor x = hg::randn({4, 6}), x3 = hg::randn({2, 3, 4}), y3 = hg::randn({2, 3, 1});
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("cat dim 0", dt, {a, b}, OP(hg::cat({in[0], in[1]}, 0)));
    check_op("cat dim 1", dt, {a, c}, OP(hg::cat({in[0], in[1]}, 1)));
    check_op("cat three, dim -1", dt, {x3, y3, x3}, OP(hg::cat({in[0], in[1], in[2]}, -1)));
    check_op("contiguous of a transpose", dt, {x}, OP(in[0].t().contiguous()));
    check_op("contiguous of a permutation", dt, {x3}, OP(in[0].permute({2, 0, 1}).contiguous()));
    check_op("contiguous of a slice", dt, {x}, OP(hg::narrow(in[0], 1, 1, 3).contiguous()));
    for (hg::DType target : {hg::f32, hg::f16, hg::bf16, hg::f64}) {
      if (target == dt) continue;
      const Op cast = [target](const std::vector<Tensor>& in) { return in[0].to(target); };
      const auto [cpu, cuda] = check_op("to " + name_of(target), dt, {x}, cast);
      CHECK(cuda.out.dtype() == target);
    }
  }
}

// ---- the caching allocator (scenario 9) ------------------------------------------------------------

TEST_CASE("cuda.caching_allocator_counters_return_to_baseline_and_empty_cache_releases" * SKIP_WITHOUT_GPU) {
  const hg::Device g = gpu();
  constexpr int64_t kBig = int64_t(4) << 20, kSmall = 12000;  // bytes
  const int64_t base = hg::memory::allocated(g);
  hg::memory::reset_peak(g);
  {
    const Tensor big = hg::empty({kBig / 4}, {.device = g});
    const Tensor small = hg::empty({kSmall / 4}, {.device = g});
    CHECK(hg::memory::allocated(g) == base + kBig + kSmall);
    {
      const Tensor doubled = big * 2.0;
      CHECK(hg::memory::allocated(g) == base + 2 * kBig + kSmall);
    }
    CHECK(hg::memory::allocated(g) == base + kBig + kSmall);
  }
  CHECK(hg::memory::allocated(g) == base);
  CHECK(hg::memory::peak_allocated(g) >= base + 2 * kBig + kSmall);
  hg::memory::reset_peak(g);
  CHECK(hg::memory::peak_allocated(g) == base);

  // Freed blocks stay reserved, and the next request of that size reuses one.
  const int64_t reserved = hg::cuda::memory_reserved();
  CHECK(reserved >= 2 * kBig);
  CHECK(hg::empty({kBig / 4}, {.device = g}).numel() * 4 == kBig);  // lives for this statement only
  CHECK(hg::cuda::memory_reserved() == reserved);
  hg::cuda::empty_cache();
  CHECK(hg::cuda::memory_reserved() <= reserved - 2 * kBig);
  if (hg::memory::allocated(g) == 0) CHECK(hg::cuda::memory_reserved() == 0);
  CHECK(hg::ones({3}, {.device = g}).to_vector<float>() == std::vector<float>(3, 1.0f));
}

TEST_CASE("cuda.scenario9_out_of_memory_is_an_error_and_the_allocator_recovers" * SKIP_WITHOUT_GPU) {
  const hg::Device g = gpu();
  const int64_t base = hg::memory::allocated(g);
  CHECK_THROWS_HG(hg::empty({int64_t(1) << 40}, {.device = g}), "CUDA out of memory");  // 4 TiB
  CHECK(hg::memory::allocated(g) == base);
  CHECK(hg::ones({4}, {.device = g}).to_vector<float>() == std::vector<float>(4, 1.0f));
  const Tensor large = hg::full({int64_t(64) << 20}, 2.0, {.device = g});  // 256 MiB still fits
  CHECK(hg::sum(large).item<double>() == 2.0 * double(int64_t(64) << 20));
}

// ---- scenarios 10 and 12 ------------------------------------------------------------------------------

TEST_CASE("cuda.scenario10_mixing_cpu_and_cuda_tensors_is_an_error" * SKIP_WITHOUT_GPU) {
  const hg::Device g = gpu();
  hg::manual_seed(16);
  const Tensor x = hg::randn({4, 3}), xg = x.to(g), w = hg::randn({5, 3}), wg = w.to(g), bias = hg::zeros({5});
  const Tensor image = hg::randn({1, 3, 6, 6}).to(g), kernel = hg::randn({2, 3, 3, 3}), kernel_g = kernel.to(g);
  const Tensor targets = hg::zeros({4}, {.dtype = hg::i64}), targets_g = targets.to(g);
  const int64_t gpu_bytes = hg::memory::allocated(g);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> calls = {
      {"add", [&] { return hg::add(x, xg); }},
      {"add, cuda first", [&] { return xg + x; }},
      {"matmul", [&] { return hg::matmul(xg, w.t()); }},
      {"linear weight", [&] { return hg::linear(xg, w); }},
      {"linear bias", [&] { return hg::linear(xg, wg, bias); }},
      {"conv2d weight", [&] { return hg::conv2d(image, kernel); }},
      {"conv2d bias", [&] { return hg::conv2d(image, kernel_g, hg::zeros({2})); }},
      {"cat", [&] { return hg::cat({x, xg}, 0); }},
      {"cross_entropy cpu targets", [&] { return hg::cross_entropy(xg, targets); }},
      {"cross_entropy cpu logits", [&] { return hg::cross_entropy(x, targets_g); }},
  };
  for (const auto& [name, call] : calls) {
    INFO(name);
    std::string message;
    try {
      call();
    } catch (const hg::Error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(message.find("to be on the same device") != std::string::npos, message);
    CHECK_MESSAGE(message.find("cuda:0") != std::string::npos, message);
    CHECK_MESSAGE(message.find("cpu") != std::string::npos, message);
  }
  CHECK(hg::memory::allocated(g) == gpu_bytes);  // no implicit copy was made
}

// The targets are checked on the host before any kernel runs: no device assert, so the CUDA
// context is still usable afterwards (pytorch#18014).
TEST_CASE("cuda.scenario12_out_of_range_target_is_an_error_and_the_context_survives" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(17);
  const Tensor logits = hg::randn({4, 5});
  const Tensor logits_g = logits.to(gpu()).requires_grad_();
  CHECK_THROWS_HG(hg::cross_entropy(logits_g, i64_tensor({0, 7, 1, 2}, {4}).to(gpu())), "Target 7 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits_g, i64_tensor({0, -1, 1, 2}, {4}).to(gpu()), {.label_smoothing = 0.1}),
                  "Target -1 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits_g, i64_tensor({5, 0, 0, 0}, {4}).to(gpu()), {.ignore_index = 0}),
                  "Target 5 is out of bounds");
  const Tensor targets = i64_tensor({0, 4, 1, 2}, {4});
  const Tensor loss = hg::cross_entropy(logits_g, targets.to(gpu()));
  loss.backward();
  hg::cuda::synchronize();
  expect_close(loss, hg::cross_entropy(logits, targets), hg_test::tolerance_for(hg::f32), "loss after the errors");
  CHECK(logits_g.grad().device() == gpu());
  CHECK(std::isfinite(hg::sum(logits_g.grad()).item<float>()));
}

// ---- AMP (scenario 21) and the optimizers -----------------------------------------------------------

namespace {

struct AmpRun {
  std::vector<double> scales;  // get_scale() after each update()
  std::vector<int> applied;    // step()'s StepResult (empty with step_async)
  std::vector<Tensor> params;  // on the CPU, after the loop
  int64_t steps_applied = 0;
};

// Six iterations of a small MLP with SGD, f16 autocast and a GradScaler (growth every 2 clean
// steps); iteration 3 gets an inf in one gradient, which must skip that step bitwise.
AmpRun amp_loop(hg::Device device, bool async) {
  hg::manual_seed(18);
  nn::Sequential model(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4));
  model.to(device);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  hg::manual_seed(19);
  AmpRun run;
  for (int it = 0; it < 6; ++it) {
    const Tensor x = hg::randn({16, 8}).to(device), y = hg::randint(0, 4, {16}, {.dtype = hg::i64}).to(device);
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast region(hg::f16);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    const std::vector<Tensor> params = model.parameters();
    std::vector<std::vector<float>> before;
    if (it == 2) {
      hg::NoGradGuard no_grad;
      params[0].grad().fill_(INFINITY);
      for (const Tensor& p : params) before.push_back(p.to(kCpu).to_vector<float>());
    }
    if (async) scaler.step_async(opt);
    else run.applied.push_back(scaler.step(opt).applied ? 1 : 0);
    if (it == 2)
      for (size_t i = 0; i < params.size(); ++i) CHECK(params[i].to(kCpu).to_vector<float>() == before[i]);
    scaler.update();
    run.scales.push_back(scaler.get_scale());
  }
  for (const Tensor& p : model.parameters()) run.params.push_back(p.detach().to(kCpu));
  run.steps_applied = opt.steps_applied();
  return run;
}

}  // namespace

TEST_CASE("cuda.scenario21_amp_loop_gives_the_cpu_skip_and_scale_sequence" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  const AmpRun cpu = amp_loop(kCpu, false), cuda = amp_loop(gpu(), false);
  // 1024 -> (2 clean) 2048 -> inf: 1024, tracker reset -> 1024 -> 2048 -> 2048.
  CHECK(cpu.scales == std::vector<double>{1024, 2048, 1024, 1024, 2048, 2048});
  CHECK(cpu.applied == std::vector<int>{1, 1, 0, 1, 1, 1});
  CHECK(cuda.scales == cpu.scales);
  CHECK(cuda.applied == cpu.applied);
  CHECK(cuda.steps_applied == 5);
  REQUIRE(cuda.params.size() == cpu.params.size());
  // f16 autocast on both sides; GEMM order and f16 roundings differ: scenario 21's autocast atol.
  for (size_t i = 0; i < cpu.params.size(); ++i)
    expect_close(cuda.params[i], cpu.params[i], {1e-3, 1e-3}, "parameter " + std::to_string(i));
}

// step_async never reads the device: the skip decision and the step counts stay in kernels, and
// update() works without a StepResult: the same scales, skip and parameters as with step().
TEST_CASE("cuda.step_async_then_update_needs_no_step_result" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  const AmpRun sync = amp_loop(gpu(), false), async = amp_loop(gpu(), true);
  CHECK(async.applied.empty());
  CHECK(async.scales == sync.scales);
  CHECK(async.steps_applied == 5);
  REQUIRE(async.params.size() == sync.params.size());
  for (size_t i = 0; i < sync.params.size(); ++i)
    expect_close(async.params[i], sync.params[i], hg_test::tolerance_for(hg::f32), "parameter " + std::to_string(i));
}

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

// Parameters, optimizer state (moments, masters, step counts) after three steps with the same
// gradients; with a scaler, the gradients carry a 1024 loss scale that the step removes.
std::map<std::string, Tensor> optimizer_steps(hg::Device device, hg::DType dtype, const MakeOptimizer& make,
                                              bool with_scaler) {
  hg::manual_seed(20);
  const std::vector<Tensor> params = {hg::randn({5, 7}).to(dtype).to(device).requires_grad_(),
                                      hg::randn({7}).to(dtype).to(device).requires_grad_()};
  const std::unique_ptr<optim::Optimizer> opt = make(params);
  amp::GradScaler scaler({.init_scale = 1024.0});
  // The gradients below are written pre-scaled by hand; a scaler unscales only after scale().
  if (with_scaler) (void)scaler.scale(hg::zeros({}, {.device = device}));
  for (int step = 0; step < 3; ++step) {
    hg::manual_seed(uint64_t(30 + step));
    const double loss_scale = with_scaler ? 1024.0 : 1.0;
    for (const Tensor& p : params) p.set_grad((hg::randn(p.shape()) * loss_scale).to(dtype).to(device));
    if (with_scaler) {
      scaler.step(*opt);
      scaler.update();
    } else {
      opt->step();
    }
  }
  std::map<std::string, Tensor> out = opt->state_dict();
  for (size_t i = 0; i < params.size(); ++i) out["param." + std::to_string(i)] = params[i].detach().to(kCpu);
  return out;
}

void check_optimizer(const std::string& name, hg::DType dtype, const MakeOptimizer& make, bool with_scaler = false) {
  const std::string label = name + " on " + name_of(dtype) + " parameters";
  INFO(label);
  const auto cpu = optimizer_steps(kCpu, dtype, make, with_scaler);
  const auto cuda = optimizer_steps(gpu(), dtype, make, with_scaler);
  REQUIRE(cuda.size() == cpu.size());
  for (const auto& [key, expected] : cpu) {
    REQUIRE(cuda.count(key) == 1);
    // f32 state (and masters) within T(f32); a 16-bit parameter is its master rounded: T(its dtype).
    expect_close(cuda.at(key), expected, hg_test::tolerance_for(expected.dtype()), key);
  }
}

}  // namespace

TEST_CASE("cuda.optimizer_steps_match_cpu" * SKIP_WITHOUT_GPU) {
  check_optimizer("Adam", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  });
  check_optimizer("AdamW", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.01});
  });
  check_optimizer("SGD momentum + Nesterov + weight decay", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(
        p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  });
  check_optimizer("SGD momentum + dampening", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
  });
  const MakeOptimizer sgd_master = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .master_weights = true});
  };
  check_optimizer("SGD momentum, master weights", hg::f16, sgd_master);
  check_optimizer("SGD momentum, master weights, deferred unscale", hg::f16, sgd_master, /*with_scaler=*/true);
  check_optimizer("Adam, master weights", hg::bf16, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .master_weights = true});
  });
}

// ---- scenario 25: deterministic mode --------------------------------------------------------------

namespace {
// Three Adam steps of a small CNN (conv, batch norm, relu, pool, dropout, linear) on the GPU.
std::vector<std::vector<float>> cnn_run() {
  hg::manual_seed(21);
  nn::Sequential model(nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Flatten(), nn::Dropout(0.2), nn::Linear(8 * 4 * 4, 10));
  model.to(gpu());
  optim::Adam opt(model.parameters(), {.lr = 1e-3});
  std::vector<std::vector<float>> out;
  for (int it = 0; it < 3; ++it) {
    const Tensor x = hg::randn({8, 3, 8, 8}).to(gpu()), y = hg::randint(0, 10, {8}, {.dtype = hg::i64}).to(gpu());
    opt.zero_grad();
    const Tensor loss = hg::cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    out.push_back(loss.to(kCpu).to_vector<float>());
  }
  for (const auto& [name, t] : model.state_dict()) out.push_back(t.to(kCpu).to_vector<float>());
  return out;
}
}  // namespace

TEST_CASE("cuda.scenario25_deterministic_mode_runs_are_bitwise_identical" * SKIP_WITHOUT_GPU) {
  const DeterministicScope on(true);
  const Tf32Scope full_f32(false);
  const std::vector<std::vector<float>> first = cnn_run(), second = cnn_run();
  CHECK(first == second);
}
