// The CUDA suite: every public op run on the CPU and on hg::Device::cuda() with the same
// inputs in f32, f16 and bf16 (output and every input gradient compared); the GPU variants of
// docs/testing.md's scenarios 5, 9, 10, 12, 21 and 25; the caching allocator's counters; the optimizers'
// multi-tensor kernels. Then issue 12's cases: f64 through every op family; non-contiguous,
// in-place strided and 2-byte-offset operands; NaN/inf inputs; 70 mixed parameters with one inf;
// embedding with i32 and many repeated indices; no host synchronisation in an AMP training step
// (hg::cuda::sync_count); sliced reductions; block splitting in the allocator; f64 unscaling,
// integer step counts and SGD's first step against the CPU; cuDNN on unaligned views and with no
// room for a workspace; sizes past the grid-stride limits and past 2^31 elements (cuda.large.*).
// Every case skips itself without a GPU (CPU-only builds and GPU-less machines report them as
// skipped); scripts/gpu-check.sh runs them on one.
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
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
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

// linear's ReLU epilogue (ops/epilogue.h), for the OP lambdas (which capture nothing).
constexpr hg::LinearOptions kReluEpilogue{.epilogue = hg::Epilogue::Relu};

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
    check_op("leaky_relu", dt, {x}, OP(hg::leaky_relu(in[0])));
    check_op("leaky_relu 0.2", dt, {x}, OP(hg::leaky_relu(in[0], 0.2)));
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

// Integer sums add exactly in int64 on both devices: past 2^53 a double would round them.
TEST_CASE("cuda.integer_sums_are_exact_in_int64" * SKIP_WITHOUT_GPU) {
  const int64_t big = (int64_t(1) << 53) + 1;  // not a double
  const Tensor x = i64_tensor({big, 1, big, -3, 7, 2}, {2, 3});
  const Tensor total = hg::sum(x.to(gpu()));
  CHECK(total.dtype() == hg::i64);
  CHECK(total.item<int64_t>() == 2 * big + 7);
  CHECK(total.item<int64_t>() == hg::sum(x).item<int64_t>());
  const std::vector<int64_t> rows = hg::sum(x.to(gpu()), {1}).to_vector<int64_t>();
  CHECK(rows == std::vector<int64_t>{big + 1 + big, -3 + 7 + 2});
  const std::vector<int64_t> columns = hg::sum(x.to(gpu()), {0}).to_vector<int64_t>();
  CHECK(columns == std::vector<int64_t>{big - 3, 1 + 7, big + 2});
  // A long row takes the sliced path (partial sums combined by a second kernel).
  const Tensor long_row = hg::full({100000}, double((int64_t(1) << 40) + 1), {.dtype = hg::i64});
  CHECK(hg::sum(long_row.to(gpu())).item<int64_t>() == 100000 * ((int64_t(1) << 40) + 1));
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

TEST_CASE("cuda.linear_and_its_relu_epilogue_match_cpu" * SKIP_WITHOUT_GPU) {
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
    check_op("linear + relu epilogue", dt, {x, w, b}, OP(hg::linear(in[0], in[1], in[2], kReluEpilogue)), gemm);
    check_op("linear + relu epilogue without bias", dt, {x, w}, OP(hg::linear(in[0], in[1], {}, kReluEpilogue)), gemm);
    check_op("linear + relu epilogue 3-D input", dt, {x3, w, b}, OP(hg::linear(in[0], in[1], in[2], kReluEpilogue)),
             gemm);
    check_op("linear + relu epilogue tensor-core sizes", dt, {xb, wb, bb},
             OP(hg::linear(in[0], in[1], in[2], kReluEpilogue)), gemm);
  }
}

TEST_CASE("cuda.conv2d_and_its_relu_epilogue_match_cpu" * SKIP_WITHOUT_GPU) {
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
    check_op("conv2d + relu epilogue padding 1", dt, {x, w, b},
             OP(hg::conv2d(in[0], in[1], in[2], {.stride = 1, .padding = 1, .epilogue = hg::Epilogue::Relu})), conv);
    check_op("conv2d + relu epilogue stride 2 without bias", dt, {x, w},
             OP(hg::conv2d(in[0], in[1], {}, {.stride = 2, .padding = 0, .epilogue = hg::Epilogue::Relu})), conv);
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
    check_op("linear + relu epilogue of an empty batch", dt, {none, w},
             OP(hg::linear(in[0], in[1], {}, kReluEpilogue)));
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
  for (const auto& [name_binding, call] : calls) {
    const std::string& name = name_binding;  // (clang 14 cannot capture a structured binding in INFO)
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

// The targets are checked by the kernel, which reports a bad one through the device error slot
// instead of a device assert: the CUDA context stays usable (pytorch#18014), the call itself never
// waits for the GPU, and the error is an hg::Error at the next synchronisation (here: item()).
TEST_CASE("cuda.scenario12_out_of_range_target_is_an_error_and_the_context_survives" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(17);
  const Tensor logits = hg::randn({4, 5});
  const Tensor logits_g = logits.to(gpu()).requires_grad_();
  CHECK_THROWS_HG(hg::cross_entropy(logits_g, i64_tensor({0, 7, 1, 2}, {4}).to(gpu())).item<float>(),
                  "Target 7 is out of bounds");
  CHECK_THROWS_HG(
      hg::cross_entropy(logits_g, i64_tensor({0, -1, 1, 2}, {4}).to(gpu()), {.label_smoothing = 0.1}).item<float>(),
      "Target -1 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits_g, i64_tensor({5, 0, 0, 0}, {4}).to(gpu()), {.ignore_index = 0}).item<float>(),
                  "Target 5 is out of bounds");
  // The report names the position, and is given once: the next read succeeds.
  const Tensor bad = hg::cross_entropy(logits_g, i64_tensor({0, 1, 2, 9}, {4}).to(gpu()));
  CHECK_THROWS_HG(hg::cuda::synchronize(), "at position 3");
  CHECK(std::isfinite(bad.item<float>()));  // the mean over the three rows that count
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
  nn::Sequential model{nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4)};
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
  check_optimizer("RMSprop centered + momentum + weight decay", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::RMSprop>(
        p, optim::RMSpropOptions{.lr = 0.01, .weight_decay = 1e-3, .momentum = 0.8, .centered = true});
  });
  check_optimizer("RMSprop, master weights, deferred unscale", hg::f16, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 0.01, .master_weights = true});
  }, /*with_scaler=*/true);
  check_optimizer("Adagrad lr decay + initial accumulator", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adagrad>(
        p, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.01, .weight_decay = 1e-3, .initial_accumulator_value = 0.1});
  });
  // An optimizer of the user's (update() in hg ops, no kernel): the base class's default update_cuda.
  check_optimizer("your own (SmoothSign)", hg::f32, [](const std::vector<Tensor>& p) {
    return std::make_unique<hg_test::SmoothSign>(p, 0.01);
  });
  check_optimizer("your own (SmoothSign), master weights, deferred unscale", hg::f16, [](const std::vector<Tensor>& p) {
    return std::make_unique<hg_test::SmoothSign>(p, 0.01, 0.9, /*master_weights=*/true);
  }, /*with_scaler=*/true);
  check_optimizer("Adadelta, master weights", hg::bf16, [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.lr = 1.0, .weight_decay = 1e-3, .master_weights = true});
  });
}

// ---- scenario 25: deterministic mode --------------------------------------------------------------

namespace {
// Three Adam steps of a small CNN (conv, batch norm, relu, pool, dropout, linear) on the GPU.
std::vector<std::vector<float>> cnn_run() {
  hg::manual_seed(21);
  nn::Sequential model{nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Flatten(), nn::Dropout(0.2), nn::Linear(8 * 4 * 4, 10)};
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

// ==== issue 12: the cases a first GPU run must answer ==================================================

namespace {

// Counts the host synchronisations the library performs from its construction on.
struct SyncProbe {
  int64_t start = hg::cuda::sync_count();
  int64_t count() const { return hg::cuda::sync_count() - start; }
};

bool debug_sync_on() {
  const char* value = std::getenv("HG_CUDA_SYNC");
  return value != nullptr && value[0] != '\0' && value[0] != '0';
}

// expect_close with NaN == NaN (and inf == inf).
void expect_close_nan(const Tensor& actual, const Tensor& expected, hg_test::Tolerance tol, const std::string& what) {
  INFO(what);
  const auto report = hg_test::compare(actual.to(kCpu), expected.to(kCpu), tol, /*equal_nan=*/true);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(kCpu).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(hg::element_size(c.dtype())));
}

}  // namespace

// ---- f64 through every op family ---------------------------------------------------------------------

// f64 is computed in f64 on both devices (cuBLASLt/cuDNN f64 kernels, double accumulators), so
// T(f64) holds everywhere.
TEST_CASE("cuda.f64_through_every_op_family" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(40);
  const hg::DType dt = hg::f64;
  const Tensor a = hg::randn({4, 5}), row = hg::randn({5}), pos = hg::rand({4, 5}) + 0.5, x3 = hg::randn({4, 5, 6});
  check_op("add", dt, {a, row}, OP(hg::add(in[0], in[1])));
  check_op("sub, mul, div", dt, {a, pos}, OP((in[0] - in[1]) * in[0] / in[1]));
  check_op("exp, log, sqrt", dt, {pos}, OP(hg::exp(in[0]) + hg::log(in[0]) + hg::sqrt(in[0])));
  check_op("pow, abs, clamp, neg", dt, {a}, OP(hg::pow(hg::abs(in[0]), 1.5) + hg::clamp(-in[0], -0.5, 0.7)));
  check_op("relu, gelu, silu", dt, {a}, OP(hg::relu(in[0]) + hg::gelu(in[0]) + hg::silu(in[0])));
  check_op("leaky_relu", dt, {a}, OP(hg::leaky_relu(in[0], 0.2)));
  check_op("sigmoid, tanh", dt, {a}, OP(hg::sigmoid(in[0]) * hg::tanh(in[0])));
  check_op("sum, mean", dt, {x3}, OP(hg::sum(in[0]) + hg::sum(hg::mean(in[0], {0, 2}))));
  check_op("sum dim 0 (columns)", dt, {x3}, OP(hg::sum(in[0], {0})));
  check_op("amax", dt, {x3}, OP(hg::amax(in[0], 1)));
  check_op("argmax", dt, {x3}, OP(hg::argmax(in[0], 0)));
  const Tensor m57 = hg::randn({5, 7}), m73 = hg::randn({7, 3}), w = hg::randn({7, 5}) * 0.3, b = hg::randn({7});
  check_op("matmul", dt, {m57, m73}, OP(hg::matmul(in[0], in[1])));
  check_op("linear", dt, {a, w, b}, OP(hg::linear(in[0], in[1], in[2])));
  check_op("linear + relu epilogue", dt, {a, w, b}, OP(hg::linear(in[0], in[1], in[2], kReluEpilogue)));
  const Tensor img = hg::randn({2, 3, 7, 6}), k = hg::randn({4, 3, 3, 3}) / 5.0, kb = hg::randn({4});
  check_op("conv2d", dt, {img, k, kb}, OP(hg::conv2d(in[0], in[1], in[2], {.stride = 2, .padding = 1})));
  check_op("max_pool2d", dt, {img}, OP(hg::max_pool2d(in[0], 2, 2)));
  check_op("avg_pool2d", dt, {img}, OP(hg::avg_pool2d(in[0], 3, 1)));
  const Tensor logits = hg::randn({9, 7}) * 2.0, targets = i64_tensor({0, 6, 3, -100, 2, 5, 1, -100, 4}, {9});
  check_op("softmax", dt, {logits}, OP(hg::softmax(in[0], 1)));
  check_op("log_softmax dim 0", dt, {logits}, OP(hg::log_softmax(in[0], 0)));
  check_op("cross_entropy", dt, {logits, targets}, OP(hg::cross_entropy(in[0], in[1], {.label_smoothing = 0.1})));
  check_op("mse_loss", dt, {a, pos}, OP(hg::mse_loss(in[0], in[1])));
  const Tensor bn = hg::randn({4, 3, 5, 5}), gamma = hg::randn({3}) * 0.2 + 1.0, beta = hg::randn({3}) * 0.3;
  check_op("batch_norm", dt, {bn, gamma, beta, hg::zeros({3}), hg::ones({3})},
           OP(hg::batch_norm(in[0], in[3], in[4], in[1], in[2], true, 0.1, 1e-5)), {.buffers = {3, 4}});
  const Tensor ln = hg::randn({4, 10}), ln_w = hg::randn({10}) * 0.2 + 1.0, ln_b = hg::randn({10});
  check_op("layer_norm", dt, {ln, ln_w, ln_b}, OP(hg::layer_norm(in[0], {10}, in[1], in[2], 1e-5)));
  check_op("dropout", dt, {a}, OP(hg::dropout(in[0], 0.3, true)));
  check_op("embedding", dt, {i64_tensor({0, 6, 3, 3, 1}, {5}), hg::randn({7, 4})}, OP(hg::embedding(in[0], in[1])));
  check_op("cat", dt, {a, pos}, OP(hg::cat({in[0], in[1]}, 1)));
  check_op("casts", dt, {a}, OP(in[0].to(hg::f32).to(hg::f64) + in[0]));
}

// ---- non-contiguous, in-place strided and 2-byte-offset operands --------------------------------------

// Every elementwise and unary op on a transposed view, a narrowed view, and a view one element into
// a 1-D tensor (for 16-bit types: 2 bytes off any vector alignment, so the wide-load path must step
// aside); then in-place writes into strided views. Elementwise results are exact (T(dtype) as a bound).
TEST_CASE("cuda.noncontiguous_inplace_and_offset_operands_match_cpu" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(41);
  const Tensor m = hg::randn({5, 4}), n = hg::randn({4, 5}), flat = hg::randn({37}), other = hg::randn({36});
  const Tensor pos_m = hg::rand({5, 4}) + 0.5, pos_flat = hg::rand({37}) + 0.5;
  using Unary = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Unary>> unary = {
      {"neg", [](const Tensor& x) { return hg::neg(x); }},       {"exp", [](const Tensor& x) { return hg::exp(x); }},
      {"abs", [](const Tensor& x) { return hg::abs(x); }},       {"relu", [](const Tensor& x) { return hg::relu(x); }},
      {"gelu", [](const Tensor& x) { return hg::gelu(x); }},     {"silu", [](const Tensor& x) { return hg::silu(x); }},
      {"sigmoid", [](const Tensor& x) { return hg::sigmoid(x); }}, {"tanh", [](const Tensor& x) { return hg::tanh(x); }},
      {"clamp", [](const Tensor& x) { return hg::clamp(x, -0.5, 0.7); }},
      {"leaky_relu", [](const Tensor& x) { return hg::leaky_relu(x, 0.2); }},
      {"pow 2", [](const Tensor& x) { return hg::pow(x, 2.0); }}, {"mul scalar", [](const Tensor& x) { return x * 1.5; }}};
  const std::vector<std::pair<std::string, Unary>> positive = {
      {"log", [](const Tensor& x) { return hg::log(x); }}, {"sqrt", [](const Tensor& x) { return hg::sqrt(x); }}};
  const Expect saved{.backward = Tol::Saved};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    for (const auto& [name, f] : unary) {
      check_op(name + " of a transpose", dt, {m}, [f = f](const std::vector<Tensor>& in) { return f(in[0].t()); }, saved);
      check_op(name + " of a narrowed view", dt, {m},
               [f = f](const std::vector<Tensor>& in) { return f(hg::narrow(in[0], 1, 1, 2)); }, saved);
      check_op(name + " one element in", dt, {flat},
               [f = f](const std::vector<Tensor>& in) { return f(hg::narrow(in[0], 0, 1, 36)); }, saved);
    }
    for (const auto& [name, f] : positive) {
      check_op(name + " of a transpose", dt, {pos_m}, [f = f](const std::vector<Tensor>& in) { return f(in[0].t()); });
      check_op(name + " one element in", dt, {pos_flat},
               [f = f](const std::vector<Tensor>& in) { return f(hg::narrow(in[0], 0, 1, 36)); });
    }
    check_op("add transposed + contiguous", dt, {m, n}, OP(hg::add(in[0].t(), in[1])));
    check_op("mul narrowed * transposed", dt, {m, n}, OP(hg::mul(hg::narrow(in[0], 0, 1, 4), hg::narrow(in[1].t(), 0, 0, 4))));
    check_op("div offset / contiguous", dt, {flat, other}, OP(hg::div(hg::narrow(in[0], 0, 1, 36), hg::abs(in[1]) + 1.0)));
    check_op("sub offset - broadcast row", dt, {flat}, OP(hg::sub(hg::narrow(in[0], 0, 1, 36).reshape({6, 6}),
                                                                   hg::narrow(in[0], 0, 0, 6))));

    // In place, through strided and offset views of a bigger tensor: the rest must stay untouched.
    hg::NoGradGuard no_grad;
    const Tensor base = hg::randn({6, 5}).to(dt), src = hg::randn({4, 5}).to(dt), line = hg::randn({29}).to(dt);
    const Tensor addend = hg::randn({27}).to(dt);
    const auto run_in_place = [&](hg::Device device) {
      Tensor b = base.to(device).clone(), l = line.to(device).clone();
      const Tensor view = hg::narrow(b.t(), 1, 1, 4);  // (5, 4), strides (1, 5)
      Tensor(view).add_(src.to(device).t());
      Tensor(view).mul_(-2.5);
      Tensor(hg::narrow(view, 0, 1, 2)).fill_(0.75);
      Tensor(hg::narrow(view, 1, 3, 1)).copy_(hg::narrow(src.to(device).t(), 1, 0, 1));
      Tensor(hg::narrow(l, 0, 1, 27)).add_(addend.to(device));  // f16: 2 bytes off alignment
      Tensor(hg::narrow(l, 0, 2, 27)).mul_(0.5);
      Tensor(hg::narrow(l, 0, 3, 5)).zero_();
      return std::pair{b, l};
    };
    const auto [cpu_base, cpu_line] = run_in_place(kCpu);
    const auto [gpu_base, gpu_line] = run_in_place(gpu());
    expect_close(gpu_base, cpu_base, hg_test::tolerance_for(dt), "in-place writes through strided views");
    expect_close(gpu_line, cpu_line, hg_test::tolerance_for(dt), "in-place writes through offset views");
  }
}

// ---- NaN and inf inputs -----------------------------------------------------------------------------------

TEST_CASE("cuda.nan_and_inf_inputs_match_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  const double nan = std::nan(""), inf = INFINITY;
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    // amax/argmax: the first NaN wins, along rows (warp kernel) and columns (column kernel).
    const Tensor x = hg::from_vector<double>({1, nan, 3, nan, 2, 5, -inf, 0}, {2, 4}).to(dt);
    CHECK(hg::argmax(x.to(gpu()), 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
    CHECK(hg::argmax(x.to(gpu()), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0});
    expect_close_nan(hg::amax(x.to(gpu()), 1), hg::amax(x, 1), hg_test::tolerance_for(dt), "amax rows with NaN");
    expect_close_nan(hg::amax(x.to(gpu()), 0), hg::amax(x, 0), hg_test::tolerance_for(dt), "amax columns with NaN");
    // Long lines, sliced over many warps/blocks: the smallest NaN index still wins, then the first maximum.
    Tensor long_rows = hg::zeros({3, 100000}, {.dtype = dt});
    {
      hg::NoGradGuard no_grad;
      hg::narrow(hg::narrow(long_rows, 0, 1, 1), 1, 88888, 1).fill_(nan);
      hg::narrow(hg::narrow(long_rows, 0, 1, 1), 1, 77777, 1).fill_(nan);
      hg::narrow(hg::narrow(long_rows, 0, 2, 1), 1, 99999, 1).fill_(7.0);
      hg::narrow(hg::narrow(long_rows, 0, 2, 1), 1, 5, 1).fill_(7.0);
    }
    CHECK(hg::argmax(long_rows.to(gpu()), 1).to_vector<int64_t>() == std::vector<int64_t>{0, 77777, 5});
    CHECK(hg::argmax(long_rows.t().contiguous().to(gpu()), 0).to_vector<int64_t>() == std::vector<int64_t>{0, 77777, 5});

    // softmax / log_softmax: a row with a NaN is all NaN, a row of -inf is 0/0 = NaN, as on the CPU.
    const Tensor rows = hg::from_vector<double>({1, 2, nan, 0, -inf, -inf, -inf, -inf, 0, 1, 2, 3}, {3, 4}).to(dt);
    for (int dim : {1, 0}) {
      expect_close_nan(hg::softmax(rows.to(gpu()), dim), hg::softmax(rows, dim), hg_test::tolerance_for(dt), "softmax");
      expect_close_nan(hg::log_softmax(rows.to(gpu()), dim), hg::log_softmax(rows, dim), hg_test::tolerance_for(dt),
                       "log_softmax");
    }

    // max_pool2d: a window holding a NaN gives NaN, and the gradient goes to the NaN.
    Tensor image = hg::randn({1, 2, 4, 4}).to(dt);
    {
      hg::NoGradGuard no_grad;
      hg::narrow(hg::narrow(hg::narrow(image, 1, 1, 1), 2, 1, 1), 3, 2, 1).fill_(nan);
    }
    const Tensor ic = image.clone().requires_grad_(), ig = image.to(gpu()).requires_grad_();
    const Tensor pc = hg::max_pool2d(ic, 2, 2), pg = hg::max_pool2d(ig, 2, 2);
    expect_close_nan(pg, pc, hg_test::tolerance_for(dt), "max_pool2d with a NaN");
    hg::sum(pc).backward();
    hg::sum(pg).backward();
    expect_close(ig.grad(), ic.grad(), hg_test::tolerance_for(dt), "max_pool2d gradient with a NaN");

    // linear with the relu epilogue: NaN in, NaN out on both devices (cuBLASLt's RELU epilogue would give 0).
    Tensor input = hg::randn({3, 4}).to(dt);
    {
      hg::NoGradGuard no_grad;
      hg::narrow(hg::narrow(input, 0, 1, 1), 1, 2, 1).fill_(nan);
    }
    const Tensor w = (hg::randn({5, 4}) * 0.5).to(dt), b = hg::randn({5}).to(dt);
    const hg::LinearOptions relu{.epilogue = hg::Epilogue::Relu};
    const Tensor yc = hg::linear(input, w, b, relu), yg = hg::linear(input.to(gpu()), w.to(gpu()), b.to(gpu()), relu);
    expect_close_nan(yg, yc, tolerance(Tol::Gemm, dt), "linear + relu epilogue with a NaN input");
    for (float v : hg::narrow(yg, 0, 1, 1).to(hg::f32).to_vector<float>()) CHECK(std::isnan(v));
    // The same for conv2d's relu epilogue (cuDNN's bias, then relu's own functor).
    const Tensor image_nan = image.detach();
    const Tensor k = (hg::randn({3, 2, 3, 3}) / 5.0).to(dt), kb = hg::randn({3}).to(dt);  // (1,2,4,4) -> (1,3,4,4)
    const hg::Conv2dFuncOptions conv_relu{.padding = 1, .epilogue = hg::Epilogue::Relu};
    const Tensor cc = hg::conv2d(image_nan, k, kb, conv_relu);
    const Tensor cg = hg::conv2d(image_nan.to(gpu()), k.to(gpu()), kb.to(gpu()), conv_relu);
    expect_close_nan(cg, cc, tolerance(Tol::Conv, dt), "conv2d + relu epilogue with a NaN pixel");
    const std::vector<float> conv_values = cg.to(hg::f32).to_vector<float>();
    CHECK(std::count_if(conv_values.begin(), conv_values.end(), [](float v) { return std::isnan(v); }) > 0);
  }
}

// The scaler flags a NaN gradient and a bf16 overflow (a product past bf16's range rounds to inf):
// each step is skipped bitwise, backs off, and names its parameter.
TEST_CASE("cuda.grad_scaler_skips_nan_and_bf16_overflow" * SKIP_WITHOUT_GPU) {
  for (const bool master : {false, true}) {
    INFO("master weights: ", master);
    const Tensor p32 = hg::randn({3, 4}).to(gpu()).requires_grad_();
    const Tensor p16 = hg::randn({6}).to(hg::bf16).to(gpu()).requires_grad_();
    optim::SGD opt({p32, p16}, {.lr = 0.1, .momentum = 0.9, .master_weights = master});
    amp::GradScaler scaler({.init_scale = 256.0});
    scaler.set_parameter_names({{"w32", p32}, {"w16", p16}});
    const auto before = std::pair{bytes_of(p32), bytes_of(p16)};
    p32.set_grad(hg::from_vector<float>({1, 2, 3, 4, 5, std::nanf(""), 7, 8, 9, 10, 11, 12}, {3, 4}).to(gpu()));
    p16.set_grad(hg::ones({6}, {.dtype = hg::bf16, .device = gpu()}));
    amp::StepResult r = scaler.step(opt);
    CHECK_FALSE(r.applied);
    CHECK(scaler.diagnostics().nonfinite_parameters == std::vector<std::string>{"w32"});
    scaler.update();
    CHECK(scaler.get_scale() == 128.0);
    // 3e38 * 4 does not fit bf16 (max ~3.39e38): the gradient holds inf.
    p32.set_grad(hg::ones({3, 4}, {.device = gpu()}));
    p16.set_grad(hg::full({6}, 3e38, {.dtype = hg::bf16, .device = gpu()}) * 4.0);
    r = scaler.step(opt);
    CHECK_FALSE(r.applied);
    CHECK(r.skipped_in_a_row == 2);
    CHECK(scaler.diagnostics().nonfinite_parameters == std::vector<std::string>{"w16"});
    scaler.update();
    CHECK(std::pair{bytes_of(p32), bytes_of(p16)} == before);
    CHECK(opt.steps_applied() == 0);
  }
}

// ---- 70 parameters of mixed shapes and dtypes -------------------------------------------------------------

namespace {

constexpr int kParams = 70, kInfParam = 66, kZeroSize = 7, kBig = 33;
// 330 chunks of 65536 elements and a tail: more than one launch's 320 blocks, so the multi-tensor
// launcher must carry this tensor over into a second launch.
constexpr int64_t kBigNumel = 65536 * 330 + 7;
bool without_grad(int i) { return i >= 10 && i < 15; }

hg::DType dtype_of_param(int i) { return std::array{hg::f32, hg::f16, hg::bf16, hg::f64}[size_t(i % 4)]; }

hg::Shape shape_of_param(int i) {
  if (i == kZeroSize) return {0, 5};
  if (i == kBig) return {kBigNumel};
  if (i % 3 == 0) return {i % 11 + 1};
  return {i % 5 + 1, i % 7 + 2};
}

struct MixedRun {
  std::map<std::string, Tensor> state;  // parameters and optimizer state, on the CPU
  std::vector<int> applied;
  std::vector<std::string> flagged;     // diagnostics of the skipped step
  bool skipped_step_left_everything = false;
};

// Three iterations of `make`'s optimizer over 70 parameters (f32/f16/bf16/f64, one zero-size, five
// without a gradient) with a GradScaler; iteration 2 has an inf in parameter #66 only.
MixedRun mixed_parameter_steps(hg::Device device, const MakeOptimizer& make) {
  hg::manual_seed(42);
  std::vector<Tensor> params;
  for (int i = 0; i < kParams; ++i)
    params.push_back(hg::randn(shape_of_param(i)).to(dtype_of_param(i)).to(device).requires_grad_());
  const std::unique_ptr<optim::Optimizer> opt = make(params);
  amp::GradScaler scaler({.init_scale = 1024.0});
  MixedRun run;
  for (int it = 0; it < 3; ++it) {
    hg::manual_seed(uint64_t(50 + it));
    for (int i = 0; i < kParams; ++i) {
      if (without_grad(i)) continue;
      Tensor g = (hg::randn(params[size_t(i)].shape()) * 1024.0).to(params[size_t(i)].dtype()).to(device);
      if (it == 1 && i == kInfParam) {
        hg::NoGradGuard no_grad;
        hg::narrow(g.flatten(), 0, g.numel() - 1, 1).fill_(INFINITY);
      }
      params[size_t(i)].set_grad(g);
    }
    std::vector<std::vector<uint8_t>> before;
    if (it == 1)
      for (const Tensor& p : params) before.push_back(bytes_of(p));
    const auto state_before = it == 1 ? opt->state_dict() : std::map<std::string, Tensor>();
    run.applied.push_back(scaler.step(*opt).applied ? 1 : 0);
    if (it == 1) {
      run.flagged = scaler.diagnostics().nonfinite_parameters;
      bool same = true;
      for (size_t i = 0; i < params.size(); ++i) same = same && bytes_of(params[i]) == before[i];
      for (const auto& [key, t] : opt->state_dict()) same = same && bytes_of(t) == bytes_of(state_before.at(key));
      run.skipped_step_left_everything = same;
    }
    scaler.update();
  }
  run.state = opt->state_dict();
  for (int i = 0; i < kParams; ++i) run.state["param." + std::to_string(i)] = params[size_t(i)].detach().to(kCpu);
  return run;
}

void check_mixed_parameters(const std::string& name, const MakeOptimizer& make) {
  INFO(name);
  const MixedRun cpu = mixed_parameter_steps(kCpu, make), cuda = mixed_parameter_steps(gpu(), make);
  CHECK(cpu.applied == std::vector<int>{1, 0, 1});
  CHECK(cuda.applied == cpu.applied);
  CHECK(cuda.skipped_step_left_everything);
  REQUIRE(cuda.flagged.size() == 1);
  CHECK(cuda.flagged[0].rfind("#66 ", 0) == 0);
  CHECK(cuda.flagged == cpu.flagged);
  CHECK(cuda.state.at("steps_applied").item<int64_t>() == 2);
  for (int i = 10; i < 15; ++i) CHECK(cuda.state.count("state." + std::to_string(i) + ".step") == 0);
  CHECK(cuda.state.at("state.7.step").item<int64_t>() == 2);
  REQUIRE(cuda.state.size() == cpu.state.size());
  for (const auto& [key, expected] : cpu.state) {
    REQUIRE(cuda.state.count(key) == 1);
    // Same formulas on both sides; nvcc's fused multiply-adds move f32 results by an ulp, which
    // a 16-bit parameter (its master rounded) may show as one 16-bit ulp: T(its dtype).
    expect_close(cuda.state.at(key), expected, hg_test::tolerance_for(expected.dtype()), key);
  }
}

}  // namespace

TEST_CASE("cuda.seventy_mixed_parameters_one_inf_skips_the_whole_step" * SKIP_WITHOUT_GPU) {
  check_mixed_parameters("SGD momentum, master weights", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1,
                                                             .weight_decay = 1e-3, .master_weights = true});
  });
  check_mixed_parameters("Adam, master weights", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01, .master_weights = true});
  });
  check_mixed_parameters("AdamW, 16-bit parameters updated in 16 bits", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.01});
  });  check_mixed_parameters("RMSprop centered, master weights", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true,
                                                                     .master_weights = true});
  });
  check_mixed_parameters("Adagrad, master weights", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 0.1, .master_weights = true});
  });
  check_mixed_parameters("Adadelta, 16-bit parameters updated in 16 bits", [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{});
  });
}

// ---- embedding ------------------------------------------------------------------------------------------

// i32 indices, and 10,000 indices into 7 rows: each row's gradient is a sum of ~1,430 rows, added
// with atomics on the GPU in an order that varies. In f32 that order moves the sums (of magnitude
// ~40) by up to ~1e-5 relative, hence the tolerance; f64 keeps T(f64).
TEST_CASE("cuda.embedding_i32_indices_and_many_indices_into_few_rows" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(43);
  std::vector<int32_t> many(10000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = int32_t((i * 7919 + i / 3) % 7);
  const Tensor idx32 = hg::from_vector(many, {100, 100}), idx64 = idx32.to(hg::i64);
  for (hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    INFO(name_of(dt));
    const Tensor table = hg::randn({7, 16}).to(dt);
    for (const Tensor& idx : {idx32, idx64}) {
      INFO("indices ", name_of(idx.dtype()));
      const Tensor tc = table.clone().requires_grad_(), tg = table.to(gpu()).requires_grad_();
      const Tensor oc = hg::embedding(idx, tc), og = hg::embedding(idx.to(gpu()), tg);
      CHECK(bytes_of(og) == bytes_of(oc));  // a gather: bitwise
      if (hg::is_16bit_floating(dt)) continue;  // 16-bit atomics round every one of the ~1,430 adds
      const Tensor g = hg::randn(oc.shape()).to(dt);
      oc.backward(g);
      og.backward(g.to(gpu()));
      expect_close(tg.grad(), tc.grad(), dt == hg::f32 ? hg_test::Tolerance{1e-4, 1e-4} : hg_test::tolerance_for(dt),
                   "embedding gradient");
    }
  }
}

// An out-of-range index is found by the kernel and reported at the next synchronisation; its row
// reads as zeros meanwhile, nothing outside the table is touched, and the GPU stays usable.
TEST_CASE("cuda.embedding_out_of_range_index_is_an_error_at_the_next_sync" * SKIP_WITHOUT_GPU) {
  const Tensor table = hg::randn({7, 3}).to(gpu());
  const Tensor out = hg::embedding(hg::from_vector<int64_t>({0, 1, 2, 9}, {4}).to(gpu()), table);
  CHECK_THROWS_HG(out.to(kCpu), "embedding: index 9 at position 3 is out of range for a table of 7 rows");
  CHECK_THROWS_HG(hg::embedding(hg::from_vector<int32_t>({-1, 1}, {2}).to(gpu()), table).to(kCpu),
                  "index -1 at position 0");
  const Tensor good = hg::embedding(hg::from_vector<int32_t>({6, 0}, {2}).to(gpu()), table);
  expect_close(good, hg::embedding(hg::from_vector<int32_t>({6, 0}, {2}), table.to(kCpu)), hg_test::tolerance_for(hg::f32),
               "embedding after the error");
}

// ---- no hidden host synchronisations ---------------------------------------------------------------------

namespace {

// `step(read_result)` is one whole AMP training step (zero_grad, forward under f16 autocast,
// scaled backward, step or step_async, update). After three warm-up steps (allocations, library
// handles, GEMM/conv heuristics, the mapped page), two step_async steps wait for the GPU 0 times
// and a step that reads its StepResult exactly once.
template <class Step>
void check_step_syncs(const std::string& name, const Step& step) {
  INFO(name);
  for (int i = 0; i < 3; ++i) step(i == 2);
  const SyncProbe async;
  step(false);
  step(false);
  CHECK(async.count() == 0);
  const SyncProbe read;
  step(true);
  CHECK(read.count() == 1);
}

template <class Model>
auto amp_step(Model& model, optim::Optimizer& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
  return [&model, &opt, &scaler, x, y](bool read_result) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast region(hg::f16);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    if (read_result) (void)scaler.step(opt);  // (an early step may overflow and skip: no matter)
    else scaler.step_async(opt);
    scaler.update();
  };
}

}  // namespace

TEST_CASE("cuda.amp_training_step_never_waits_and_reading_its_result_waits_once" * SKIP_WITHOUT_GPU) {
  if (debug_sync_on()) {
    MESSAGE("skipped: HG_CUDA_SYNC=1 waits after every launch by design");
    return;
  }
  const Tf32Scope full_f32(false);
  const hg::Device g = gpu();
  hg::manual_seed(48);
  {
    nn::Sequential model{nn::Linear(64, 128), nn::ReLU(), nn::Linear(128, 10)};
    model.to(g);
    optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    amp::GradScaler scaler;
    const Tensor x = hg::randn({32, 64}).to(g), y = hg::randint(0, 10, {32}, {.dtype = hg::i64}).to(g);
    check_step_syncs("MLP (linear, relu, cross_entropy), SGD with momentum", amp_step(model, opt, scaler, x, y));
  }
  {
    nn::Sequential model{nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                         nn::Flatten(), nn::Linear(8 * 4 * 4, 10)};
    model.to(g);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    amp::GradScaler scaler;
    const Tensor x = hg::randn({16, 3, 8, 8}).to(g), y = hg::randint(0, 10, {16}, {.dtype = hg::i64}).to(g);
    check_step_syncs("CNN (conv, batch norm, max pool), Adam", amp_step(model, opt, scaler, x, y));
  }
  {
    nn::Sequential model{nn::Embedding(50, 16), nn::Flatten(), nn::Linear(6 * 16, 10)};
    model.to(g);
    optim::AdamW opt(model.parameters(), {.lr = 1e-3});
    amp::GradScaler scaler;
    const Tensor x = hg::randint(0, 50, {32, 6}, {.dtype = hg::i64}).to(g);
    const Tensor y = hg::randint(0, 10, {32}, {.dtype = hg::i64}).to(g);
    check_step_syncs("embedding (gather, atomic backward), AdamW", amp_step(model, opt, scaler, x, y));
  }
}

// The fixes behind that, one by one: factories and fill_ pass the value as a kernel argument,
// matmul writes its output without zero-filling it first, a plain optimizer step keeps its counts
// on the device. Only the reads at the end wait.
TEST_CASE("cuda.factories_fill_matmul_and_plain_optimizer_steps_do_not_wait" * SKIP_WITHOUT_GPU) {
  if (debug_sync_on()) {
    MESSAGE("skipped: HG_CUDA_SYNC=1 waits after every launch by design");
    return;
  }
  const hg::Device g = gpu();
  hg::manual_seed(49);
  const Tensor a = hg::randn({64, 32}).to(g), b = hg::randn({32, 16}).to(g);
  const Tensor w = hg::randn({16}).to(g).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  w.set_grad(hg::ones({16}, {.device = g}));
  opt.step();  // creates the optimizer state
  (void)hg::matmul(a, b);  // the cuBLASLt handle and heuristic
  hg::cuda::synchronize();
  const SyncProbe probe;
  Tensor z = hg::zeros({1000}, {.device = g});
  const Tensor o = hg::ones({7, 3}, {.dtype = hg::f16, .device = g});
  const Tensor f = hg::full({5}, -2.5, {.dtype = hg::bf16, .device = g});
  const Tensor n = hg::full({4}, 7.0, {.dtype = hg::i64, .device = g});
  z.fill_(3.0);
  hg::narrow(o.t(), 0, 1, 2).fill_(0.5);  // a strided fill: columns 1 and 2
  const Tensor c = hg::matmul(a, b);
  w.set_grad(hg::ones({16}, {.device = g}));
  opt.step();
  CHECK(probe.count() == 0);
  CHECK(z.to_vector<float>() == std::vector<float>(1000, 3.0f));
  CHECK(probe.count() == 1);
  CHECK(o.to(hg::f32).to_vector<float>() == std::vector<float>{1, .5, .5, 1, .5, .5, 1, .5, .5, 1, .5, .5, 1, .5, .5,
                                                               1, .5, .5, 1, .5, .5});
  CHECK(f.to(hg::f32).to_vector<float>() == std::vector<float>(5, -2.5f));
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>(4, 7));
  expect_close(c, hg::matmul(a.to(kCpu), b.to(kCpu)), tolerance(Tol::Gemm, hg::f32), "matmul into an unfilled output");
  CHECK(opt.steps_applied() == 2);
}

// ---- reductions -------------------------------------------------------------------------------------------

// Shapes that take every path of kernels/cuda/reduce.cu: one output sliced over thousands of warps,
// columns sliced over blocks, many short rows, permuted dims; amax/argmax along rows and columns.
// Sums accumulate in double on both devices (T(dtype)); every result is bitwise the same when run
// again (fixed combination order).
TEST_CASE("cuda.reductions_slice_long_rows_and_columns_and_stay_deterministic" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(44);
  const std::vector<std::tuple<std::string, hg::Shape, Op>> cases = {
      {"sum of 10,000,003 elements (one output, sliced)", {10000003}, OP(hg::sum(in[0]))},
      {"mean over dim 0 of (1000003, 3) (columns, sliced)", {1000003, 3}, OP(hg::mean(in[0], {0}))},
      {"sum over dim 1 of (3, 100001, 70)", {3, 100001, 70}, OP(hg::sum(in[0], {1}))},
      {"sum over dims 0, 2 of (64, 5, 33)", {64, 5, 33}, OP(hg::sum(in[0], {0, 2}))},
      {"sum over dim 1 of (20000, 37) (many short rows)", {20000, 37}, OP(hg::sum(in[0], {1}))},
      {"amax over dim 0 of (300001, 5)", {300001, 5}, OP(hg::amax(in[0], 0))},
      {"argmax over dim 1 of (5, 300001)", {5, 300001}, OP(hg::argmax(in[0], 1))},
      {"argmax over dim 0 of (300001, 5)", {300001, 5}, OP(hg::argmax(in[0], 0))},
  };
  for (hg::DType dt : {hg::f32, hg::f16}) {
    for (const auto& [name_binding, shape, op] : cases) {
      const auto& name = name_binding;  // (clang 14 cannot capture a structured binding in INFO)
      INFO(name, " in ", name_of(dt));
      const Tensor x = hg::randn(shape).to(dt), xg = x.to(gpu());
      const Tensor expected = op({x}), first = op({xg}), second = op({xg});
      expect_close(first, expected, hg_test::tolerance_for(expected.dtype()), name);
      CHECK(bytes_of(first) == bytes_of(second));
    }
  }
}

// ---- the caching allocator --------------------------------------------------------------------------------

TEST_CASE("cuda.caching_allocator_splits_blocks_and_reports_reserved" * SKIP_WITHOUT_GPU) {
  const hg::Device g = gpu();
  constexpr int64_t kMiB = int64_t(1) << 20;
  hg::cuda::empty_cache();
  const int64_t r0 = hg::memory::reserved(g);
  CHECK(r0 == hg::cuda::memory_reserved());
  CHECK(r0 >= hg::memory::allocated(g));
  {
    // Sixteen 1 MiB + 1 B tensors share one 20 MiB segment; rounded up to 2 MiB blocks each they
    // would hold 32 MiB.
    std::vector<Tensor> tensors;
    for (int i = 0; i < 16; ++i) tensors.push_back(hg::empty({kMiB + 1}, {.dtype = hg::u8, .device = g}));
    CHECK(hg::memory::reserved(g) - r0 <= 20 * kMiB);
    CHECK(hg::memory::reserved(g) >= hg::memory::allocated(g));
  }
  hg::cuda::empty_cache();
  const int64_t r1 = hg::memory::reserved(g);
  { const Tensor block = hg::empty({64 * kMiB}, {.dtype = hg::u8, .device = g}); }
  const int64_t r2 = hg::memory::reserved(g);
  CHECK(r2 - r1 == 64 * kMiB);
  {
    // The freed 64 MiB block serves two 30 MiB tensors: nothing new from the driver.
    const Tensor a = hg::empty({30 * kMiB}, {.dtype = hg::u8, .device = g});
    const Tensor b = hg::empty({30 * kMiB}, {.dtype = hg::u8, .device = g});
    CHECK(hg::memory::reserved(g) == r2);
    CHECK(a.raw_data() != b.raw_data());
    CHECK(hg::memory::allocated(g) >= 60 * kMiB);
  }
  // Freed, the pieces merge back into one free segment, which empty_cache returns.
  hg::cuda::empty_cache();
  CHECK(hg::memory::reserved(g) == r1);
  CHECK(hg::ones({3}, {.device = g}).to_vector<float>() == std::vector<float>(3, 1.0f));
}

// ---- CPU == GPU: f64 gradients, step counts, SGD's first step ---------------------------------------------

TEST_CASE("cuda.f64_gradients_are_unscaled_in_f64" * SKIP_WITHOUT_GPU) {
  const Tensor p = hg::zeros({3}, {.dtype = hg::f64}).to(gpu()).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 65536.0});
  p.set_grad(hg::from_vector<double>({1e300, 0.1 * 65536.0, -3.0 * 65536.0}, {3}).to(gpu()));
  scaler.unscale_(opt);
  // Through f32, 1e300 would be inf (a skipped step) and 0.1 would come back as 0.100000001490116.
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1e300 / 65536.0, 0.1, -3.0});
  CHECK(scaler.step(opt).applied);
  CHECK(p.detach().to_vector<double>() == std::vector<double>{-1e300 / 65536.0, -0.1, 3.0});
}

// The device counts are i64 (an f32 count stops at 2^24); they are created from the loaded count
// exactly (as a fill value's bits, not through a double).
TEST_CASE("cuda.step_counts_stay_exact_past_2_24_and_2_53" * SKIP_WITHOUT_GPU) {
  for (const int64_t start : {int64_t(1) << 24, (int64_t(1) << 53) + 2}) {
    INFO("count before the step: ", start);
    const auto cpu = hg_test::adam_step_after_count(kCpu, start), cuda = hg_test::adam_step_after_count(gpu(), start);
    CHECK(cuda.at("state.0.step").item<int64_t>() == start + 1);
    CHECK(cuda.at("steps_applied").item<int64_t>() == start + 1);
    expect_close(cuda.at("param"), cpu.at("param"), hg_test::tolerance_for(hg::f32), "parameter");
  }
}

namespace {
// The three situations of optim.sgd.first_step_is_the_one_without_a_momentum_buffer, on `device`.
std::map<std::string, Tensor> sgd_first_steps(hg::Device device) {
  const optim::SGDOptions options{.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
  std::map<std::string, Tensor> out;
  {
    const Tensor w = hg::zeros({2}).to(device).requires_grad_();
    optim::SGD opt({w}, options);
    opt.load_state_dict({{"param_groups.0.lr", hg::full({}, 0.1, {.dtype = hg::f64})},
                         {"state.0.step", hg::full({}, 0.0, {.dtype = hg::i64})},
                         {"state.0.momentum_buffer", hg::from_vector<float>({4, -2}, {2})}});
    w.set_grad(hg::from_vector<float>({2, 2}, {2}).to(device));
    opt.step();
    out["loaded.buffer"] = opt.state_dict().at("state.0.momentum_buffer").to(kCpu);
    out["loaded.param"] = w.detach().to(kCpu);
  }
  {
    const Tensor w = hg::zeros({2}).to(device).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1});
    w.set_grad(hg::ones({2}, {.device = device}));
    opt.step();
    opt.step();
    opt.options.momentum = 0.9;
    opt.options.dampening = 0.5;
    w.set_grad(hg::from_vector<float>({2, -4}, {2}).to(device));
    opt.step();
    out["switched_on.buffer"] = opt.state_dict().at("state.0.momentum_buffer").to(kCpu);
  }
  {
    const Tensor w = hg::zeros({2}).to(device).requires_grad_();
    optim::SGD opt({w}, options);
    amp::GradScaler scaler({.init_scale = 4});
    w.set_grad(hg::from_vector<float>({INFINITY, 4}, {2}).to(device));
    CHECK_FALSE(scaler.step(opt).applied);
    scaler.update();
    CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);  // nothing saved for the skipped step
    w.set_grad(hg::from_vector<float>({4, 8}, {2}).to(device));
    CHECK(scaler.step(opt).applied);
    out["after_skip.buffer"] = opt.state_dict().at("state.0.momentum_buffer").to(kCpu);
  }
  return out;
}
}  // namespace

TEST_CASE("cuda.sgd_first_step_rule_matches_cpu" * SKIP_WITHOUT_GPU) {
  const auto cpu = sgd_first_steps(kCpu), cuda = sgd_first_steps(gpu());
  CHECK_CLOSE(cpu.at("loaded.buffer"), hg::from_vector<float>({4.6f, -0.8f}, {2}));
  CHECK_CLOSE(cpu.at("switched_on.buffer"), hg::from_vector<float>({2, -4}, {2}));
  CHECK_CLOSE(cpu.at("after_skip.buffer"), hg::from_vector<float>({2, 4}, {2}));
  REQUIRE(cuda.size() == cpu.size());
  for (const auto& [key, expected] : cpu) expect_close(cuda.at(key), expected, hg_test::tolerance_for(hg::f32), key);
}

// ---- cuDNN: unaligned views, no room for a workspace ------------------------------------------------------

// 3 * 5 * 5 = 75 elements per image: the second image of an f16 batch starts 150 bytes in, only
// 2-byte aligned; a filter holds 27 elements (54 bytes). cuDNN gets realigned copies.
TEST_CASE("cuda.conv2d_on_2_byte_aligned_views_matches_cpu" * SKIP_WITHOUT_GPU) {
  const Tf32Scope full_f32(false);
  hg::manual_seed(45);
  const Tensor x = hg::randn({3, 3, 5, 5}), w = hg::randn({5, 3, 3, 3}) / std::sqrt(27.0), b = hg::randn({4});
  const Expect conv{.forward = Tol::Conv, .backward = Tol::Conv};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    check_op("conv2d of views one image / one filter in", dt, {x, w, b},
             OP(hg::conv2d(hg::narrow(in[0], 0, 1, 2), hg::narrow(in[1], 0, 1, 4), in[2], {.stride = 1, .padding = 1})),
             conv);
    check_op("conv2d + relu epilogue of a view one image in", dt, {x, w},
             OP(hg::conv2d(hg::narrow(in[0], 0, 1, 2), in[1], {},
                           {.stride = 2, .padding = 0, .epilogue = hg::Epilogue::Relu})),
             conv);
  }
}

// HG_CUDNN_WORKSPACE_LIMIT_MB=0 (registered as its own ctest, cuda.cudnn_without_workspace) makes
// every workspace allocation fail, as on a full GPU: each pass must fall back from its cached
// choice to an algorithm that needs none, and keep working on later calls.
TEST_CASE("cuda.conv2d_falls_back_when_no_workspace_can_be_allocated" * SKIP_WITHOUT_GPU) {
  const char* limit = std::getenv("HG_CUDNN_WORKSPACE_LIMIT_MB");
  if (limit == nullptr) {
    MESSAGE("runs under HG_CUDNN_WORKSPACE_LIMIT_MB=0 only (ctest: cuda.cudnn_without_workspace)");
    return;
  }
  const Tf32Scope full_f32(false);
  hg::manual_seed(46);
  const Tensor x = hg::randn({4, 16, 20, 20}), w = hg::randn({32, 16, 3, 3}) / 12.0, b = hg::randn({32});
  const Expect conv{.forward = Tol::Conv, .backward = Tol::Conv};
  for (hg::DType dt : kFloatTypes) SUBCASE(name_of(dt).c_str()) {
    for (int call = 0; call < 2; ++call)
      check_op("conv2d, call " + std::to_string(call + 1), dt, {x, w, b},
               OP(hg::conv2d(in[0], in[1], in[2], {.stride = 1, .padding = 1})), conv);
  }
}

// HG_CUDA_SYNC=1 (registered as its own ctest, cuda.hg_cuda_sync_debug_mode): every launch is
// waited for and checked, so a device-side error is raised by the op that caused it.
TEST_CASE("cuda.hg_cuda_sync_1_checks_each_launch_and_names_the_op" * SKIP_WITHOUT_GPU) {
  if (!debug_sync_on()) {
    MESSAGE("runs under HG_CUDA_SYNC=1 only (ctest: cuda.hg_cuda_sync_debug_mode)");
    return;
  }
  const Tensor a = hg::ones({8}, {.device = gpu()});
  const Tensor targets = i64_tensor({0, 5}, {2}).to(gpu());
  const Tensor logits = hg::zeros({2, 3}, {.device = gpu()});
  const SyncProbe probe;
  const Tensor b = a + a;  // one kernel: one wait
  CHECK(probe.count() == 1);
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets), "Target 5 is out of bounds");  // at the call, not later
  CHECK(b.to_vector<float>() == std::vector<float>(8, 2.0f));
}

// ---- sizes past the grid-stride limits and past 2^31 elements (cuda.large.*: minutes under the
// sanitizers, so scripts/gpu-check.sh leaves them out there) -------------------------------------------------

TEST_CASE("cuda.large.grid_stride_loops_past_2_27_elements" * SKIP_WITHOUT_GPU) {
  const hg::Device g = gpu();
  constexpr int64_t n = (int64_t(1) << 27) + 3;  // one grid holds 524,280 x 256 = 2^27 - 2048 threads
  const Tensor a = hg::full({n}, 1.5, {.device = g}), b = hg::full({n}, 2.0, {.device = g});
  const Tensor c = a + b;
  CHECK(hg::narrow(c, 0, n - 3, 3).to_vector<float>() == std::vector<float>(3, 3.5f));
  CHECK(hg::sum(c).item<double>() == double(float(3.5 * double(n))));  // a double sum, rounded once
  CHECK(hg::mean(c).item<float>() == 3.5f);
  // Strided: a fill through a column view, relu of a transposed view, its contiguous copy.
  const Tensor pairs = hg::full({n, 2}, -1.0, {.device = g});
  hg::narrow(pairs, 1, 1, 1).fill_(4.0);
  const Tensor r = hg::relu(pairs.t());  // (2, n), strides (1, 2)
  CHECK(hg::narrow(hg::narrow(r, 1, n - 2, 2), 0, 0, 1).to_vector<float>() == std::vector<float>{0, 0});
  CHECK(hg::narrow(hg::narrow(r, 1, n - 2, 2), 0, 1, 1).to_vector<float>() == std::vector<float>{4, 4});
  CHECK(hg::sum(r).item<double>() == double(float(4.0 * double(n))));
  // The maximum sits in the last grid-stride round; then a NaN after it wins.
  const Tensor z = hg::zeros({n}, {.device = g});
  hg::narrow(z, 0, n - 2, 1).fill_(5.0);
  CHECK(hg::argmax(z, 0).item<int64_t>() == n - 2);
  CHECK(hg::amax(z, 0).item<float>() == 5.0f);
  hg::narrow(z, 0, n - 1, 1).fill_(NAN);
  CHECK(hg::argmax(z, 0).item<int64_t>() == n - 1);
  CHECK(hg::narrow(c.to(hg::f16), 0, n - 1, 1).to(hg::f32).item<float>() == 3.5f);
}

TEST_CASE("cuda.large.softmax_and_cross_entropy_with_4194400_rows" * SKIP_WITHOUT_GPU) {
  constexpr int64_t rows = 4194400, C = 5;  // a warp per row: past one grid's 4,194,240 warps
  hg::manual_seed(47);
  const Tensor x = hg::randn({rows, C}) * 2.0;
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t(i * 3 % size_t(C));
  t.back() = -100;
  const Tensor targets = hg::from_vector(t, {rows});
  const Tensor xc = x.clone().requires_grad_(), xg = x.to(gpu()).requires_grad_();
  const auto last = [](const Tensor& v) { return hg::narrow(v, 0, rows - 4, 4); };
  expect_close(last(hg::softmax(xg, 1)), hg::softmax(last(x), 1), hg_test::tolerance_for(hg::f32), "softmax: last rows");
  expect_close(last(hg::log_softmax(xg, 1)), hg::log_softmax(last(x), 1), hg_test::tolerance_for(hg::f32),
               "log_softmax: last rows");
  const Tensor lc = hg::cross_entropy(xc, targets), lg = hg::cross_entropy(xg, targets.to(gpu()));
  expect_close(lg, lc, hg_test::tolerance_for(hg::f32), "cross_entropy over 4,194,400 rows");
  lc.backward();
  lg.backward();
  expect_close(last(xg.grad()), last(xc.grad()), hg_test::tolerance_for(hg::f32), "cross_entropy gradient: last rows");
}

TEST_CASE("cuda.large.f16_tensor_past_2_31_elements" * SKIP_WITHOUT_GPU) {
  constexpr int64_t n = (int64_t(1) << 31) + 5;  // 4 GiB of f16: 32-bit indices would wrap
  const Tensor t = hg::zeros({n}, {.dtype = hg::f16, .device = gpu()});
  hg::narrow(t, 0, 0, 1).fill_(2.0);
  hg::narrow(t, 0, n - 3, 3).fill_(1.0);
  CHECK(hg::sum(t).item<float>() == 5.0f);  // exact: sliced, in double
  Tensor(t).add_(hg::full({1}, 0.5, {.dtype = hg::f16, .device = gpu()}));  // broadcast, in place
  CHECK(hg::narrow(t, 0, n - 6, 6).to(hg::f32).to_vector<float>() == std::vector<float>{.5f, .5f, .5f, 1.5f, 1.5f, 1.5f});
  CHECK(hg::narrow(t, 0, 0, 2).to(hg::f32).to_vector<float>() == std::vector<float>{2.5f, .5f});
  CHECK(hg::sum(hg::narrow(t, 0, int64_t(1) << 31, 5)).item<float>() == 5.5f);
  CHECK(hg::amax(t, 0).item<float>() == 2.5f);
  CHECK(hg::argmax(t, 0).item<int64_t>() == 0);
  const Tensor doubled = t + t;
  CHECK(hg::narrow(doubled, 0, n - 1, 1).to(hg::f32).item<float>() == 3.0f);
}
