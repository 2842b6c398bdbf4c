// Behaviour of the ops, docs/testing.md scenarios 6, 7 and 10-13: what goes wrong is an hg::Error that
// says why. 06 matmul/linear shape errors;  07 shape/dim errors;  10 devices;
// 11 dtype promotion (and unsafe downcasts);  12/13 cross_entropy targets.
// Helpers are in ops_test_helpers.h.
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops_test_helpers.h"

// ---- activations need floating inputs --------------------------------------------------------------

TEST_CASE("ops.activations.integer_input_is_an_error_naming_the_op") {
  const Tensor ints = hg::arange(4, {.dtype = hg::i64});
  CHECK_THROWS_HG(hg::relu(ints), "relu: expected a floating tensor, got i64");
  CHECK_THROWS_HG(hg::leaky_relu(ints), "leaky_relu: expected a floating tensor, got i64");
  CHECK_THROWS_HG(hg::leaky_relu(ints.to(hg::u8), 0.2), "leaky_relu: expected a floating tensor, got u8");
}

// ---- scenario 6: matmul / linear inner-dimension mismatch ------------------------------------------

TEST_CASE("ops.scenario06.mismatched_inner_dims_name_both_shapes_and_allocate_nothing") {
  const Tensor a = hg::randn({3, 4}), b = hg::randn({5, 6});
  const Tensor a3 = hg::randn({2, 3, 4}), b3 = hg::randn({2, 5, 6});
  const Tensor x = hg::randn({3, 4}), w = hg::randn({5, 6}), bias = hg::randn({5});
  struct Case {
    const char* what;
    std::function<void()> call;
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"2-D", [&] { hg::matmul(a, b); }, {"mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"}},
      {"3-D", [&] { hg::matmul(a3, b3); }, {"mat1 and mat2 shapes cannot be multiplied (2x3x4 and 2x5x6)"}},
      {"3-D @ 2-D", [&] { hg::matmul(a3, b); }, {"mat1 and mat2 shapes cannot be multiplied (2x3x4 and 5x6)"}},
      {"2-D @ 3-D", [&] { hg::matmul(a, b3); }, {"mat1 and mat2 shapes cannot be multiplied (3x4 and 2x5x6)"}},
      {"linear", [&] { hg::linear(x, w, bias); }, {"mat1 and mat2 shapes cannot be multiplied", "[3, 4]", "[5, 6]"}},
      {"linear 3-D", [&] { hg::linear(a3, w); }, {"mat1 and mat2 shapes cannot be multiplied", "[2, 3, 4]", "[5, 6]"}},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const int64_t before = hg::memory::allocated();
    hg::memory::reset_peak();
    std::string message;
    try {
      c.call();
    } catch (const hg::Error& e) {
      message = e.what();
    }
    for (const std::string& needle : c.needles) CHECK_MESSAGE(message.find(needle) != std::string::npos, message);
    CHECK(hg::memory::allocated() == before);
    CHECK(hg::memory::peak_allocated() == before);  // nothing was allocated, even briefly
  }
  // Autograd inputs and 16-bit inputs fail the same way.
  CHECK_THROWS_HG(hg::matmul(a.to(hg::f16), b.to(hg::f16)), "cannot be multiplied (3x4 and 5x6)");
  CHECK_THROWS_HG(hg::matmul(hg::randn({3, 4}).requires_grad_(), b), "cannot be multiplied (3x4 and 5x6)");
}

// ---- scenario 7: shape errors name the dim and the sizes -------------------------------------------

TEST_CASE("ops.scenario07.broadcast_incompatible_shapes") {
  const Tensor a = hg::zeros({2, 3}), b = hg::zeros({4, 3});
  for (const auto& call : std::vector<std::function<Tensor()>>{[&] { return hg::add(a, b); }, [&] { return hg::sub(a, b); },
                                                               [&] { return hg::mul(a, b); }, [&] { return hg::div(a, b); }}) {
    CHECK_THROWS_HG(call(), "shapes [2, 3] and [4, 3] cannot be broadcast together (dimension 0: 2 vs 4)");
  }
  CHECK_THROWS_HG(hg::add(hg::zeros({3, 1, 4}), hg::zeros({5, 3})), "[3, 1, 4] and [5, 3] cannot be broadcast");
  CHECK_THROWS_HG(hg::mse_loss(hg::zeros({3}), hg::zeros({3, 1})), "mse_loss: input shape [3] and target shape [3, 1]");
  CHECK_THROWS_HG(hg::expand(hg::zeros({2, 3}), {2, 4}), "expand: the expanded size 4 must match the existing size 3");
  CHECK_THROWS_HG(hg::expand(hg::zeros({2, 3}), {3}), "expand: cannot expand shape [2, 3]");
  CHECK_THROWS_HG(hg::matmul(hg::zeros({2, 3, 4}), hg::zeros({3, 4, 5})), "batch sizes 2 and 3");
  // Any rank: the batch dims must broadcast, the inner dims agree, and a 0-d operand is refused.
  CHECK_THROWS_HG(hg::matmul(hg::zeros({2, 3, 4, 5}), hg::zeros({3, 2, 5, 4})), "matmul (batch dimensions)");
  CHECK_THROWS_HG(hg::matmul(hg::zeros({2, 3, 4, 5}), hg::zeros({2, 3, 6, 4})),
                  "cannot be multiplied (2x3x4x5 and 2x3x6x4)");
  CHECK_THROWS_HG(hg::matmul(hg::zeros({}), hg::zeros({3})), "need at least one dimension");
}

TEST_CASE("ops.scenario07.bad_reshape_and_view") {
  const Tensor x = hg::zeros({2, 3});
  CHECK_THROWS_HG(x.reshape({4, 2}), "reshape: shape [4, 2] is invalid for input of size 6");
  CHECK_THROWS_HG(x.reshape({-1, 4}), "reshape: shape [-1, 4] is invalid for input of size 6");
  CHECK_THROWS_HG(x.reshape({-1, -1}), "only one dimension can be -1");
  CHECK_THROWS_HG(x.view({7}), "view: shape [7] is invalid for input of size 6");
  CHECK_THROWS_HG(x.t().view({6}), "view: size [6] is not compatible with the input's size [3, 2]");
  CHECK_THROWS_HG(hg::zeros({0, 3}).reshape({-1, 0}), "reshape");
  CHECK_THROWS_HG(hg::squeeze(x, 1), "squeeze: dimension 1 has size 3");
  CHECK_THROWS_HG(hg::narrow(x, 1, 2, 2), "narrow: [2, 2 + 2) is out of range for dimension 1 of size 3");
  CHECK_THROWS_HG(hg::cat({x, hg::zeros({2, 4})}, 0), "cat: sizes must match except in dimension 0");
  CHECK_THROWS_HG(hg::cat({x, hg::zeros({6})}, 0), "cat: tensor 1 has 1 dims");
  CHECK_THROWS_HG(hg::layer_norm(x, {2}, {}, {}, 1e-5), "layer_norm: normalized_shape [2] must match");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 2, 5, 5}), hg::zeros({3, 4, 3, 3})), "conv2d: input has 2 channels");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 2, 2, 2}), hg::zeros({3, 2, 3, 3})), "smaller than the kernel");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 4, 5, 5}), hg::zeros({3, 2, 3, 3}), {}, {.groups = 2}),
                  "conv2d: groups (2) must divide the input channels (4) and the output channels (3)");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 4, 5, 5}), hg::zeros({4, 1, 3, 3}), {}, {.groups = 2}),
                  "conv2d: input has 4 channels (shape [1, 4, 5, 5]) but the weight (shape [4, 1, 3, 3]) with groups = 2 "
                  "expects 2");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 2, 5, 5}), hg::zeros({2, 2, 3, 3}), {}, {.groups = 0}), "groups must be >= 1");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 2, 5, 5}), hg::zeros({2, 2, 3, 3}), {}, {.dilation = 0}),
                  "stride and dilation must be >= 1");
  CHECK_THROWS_HG(hg::conv2d(hg::zeros({1, 2, 5, 5}), hg::zeros({2, 2, 3, 3}), {}, {.dilation = 3}),
                  "smaller than the kernel (7x7 with its dilation)");
  CHECK_THROWS_HG(hg::nn::Conv2d(6, 4, 3, {.groups = 4}), "Conv2d: groups (4) must be positive and divide");
  CHECK_THROWS_HG(hg::gelu(x, {.approximate = "sigmoid"}), "gelu: approximate must be \"none\" or \"tanh\"");
  CHECK_THROWS_HG(hg::hardtanh(x, 1, -1), "hardtanh: min_val (1) must not be above max_val (-1)");
  CHECK_THROWS_HG(hg::celu(x, 0), "celu: alpha must be nonzero");
  for (const auto& activation : {hg::relu6, hg::hardsigmoid, hg::hardswish, hg::selu, hg::mish, hg::softsign, hg::logsigmoid})
    CHECK_THROWS_HG(activation(hg::arange(4, {.dtype = hg::i64})), "expected a floating tensor");
  CHECK_THROWS_HG(hg::max_pool2d(hg::zeros({1, 1, 2, 2}), 3, 1), "max_pool2d: input 2x2 is smaller than the 3x3 window");
  CHECK_THROWS_HG(hg::max_pool2d(hg::zeros({1, 1, 4, 4}), {.kernel = 3, .padding = 2}),
                  "max_pool2d: padding should be at most half the kernel (1), got 2");
  CHECK_THROWS_HG(hg::avg_pool2d(hg::zeros({1, 1, 4, 4}), {.kernel = 2, .stride = 0}), "kernel and stride must be >= 1");
  CHECK_THROWS_HG(hg::max_pool2d(hg::zeros({1, 1, 1, 1}), {.kernel = 4, .padding = 1}), "with its padding is smaller");
  CHECK_THROWS_HG(hg::max_pool2d(hg::zeros({1, 1, 40, 40}), {.kernel = 17}), "larger than 16x16");
  CHECK_THROWS_HG(hg::adaptive_avg_pool2d(hg::zeros({1, 1, 4, 4}), {2}), "output_size must be two positive sizes");
  CHECK_THROWS_HG(hg::adaptive_avg_pool2d(hg::zeros({1, 1, 4, 4}), {0, 2}), "adaptive_avg_pool2d: output_size");
  CHECK_THROWS_HG(hg::adaptive_avg_pool2d(hg::zeros({4, 4}), {1, 1}), "must be 4-D");
  CHECK_THROWS_HG(hg::adaptive_avg_pool2d(hg::zeros({1, 1, 0, 4}), {1, 1}), "must not be empty");
  CHECK_THROWS_HG(hg::cross_entropy(hg::zeros({4, 3}), hg::zeros({5}, {.dtype = hg::i64})),
                  "expected targets of shape [4]");
  CHECK_THROWS_HG(hg::linear(hg::zeros({2, 3}), hg::zeros({4, 3}), hg::zeros({3})), "bias must have shape [4]");
}

// The rest of the vision ops: every bad shape or option is an hg::Error naming the op and the cause.
TEST_CASE("ops.scenario07.sequence_ops_name_what_is_wrong") {
  using hg::zeros;
  const Tensor mask = zeros({3, 4}, {.dtype = hg::u8});
  CHECK_THROWS_HG(hg::masked_fill(zeros({3, 4}), zeros({3, 4}), 1.0), "masked_fill: expected an integer mask (u8");
  CHECK_THROWS_HG(hg::masked_fill(zeros({2, 4}), mask, 1.0), "masked_fill");
  CHECK_THROWS_HG(hg::masked_fill(zeros({3, 4}, {.dtype = hg::i64}), mask, 0.5),
                  "masked_fill: value 0.5 cannot be stored in a tensor of dtype i64");
  CHECK_THROWS_HG(hg::tril(zeros({4})), "tril: expected a tensor with at least 2 dimensions, got shape [4]");
  CHECK_THROWS_HG(hg::triu(zeros({})), "triu: expected a tensor with at least 2 dimensions");
  CHECK_THROWS_HG(hg::split(zeros({5}), 0), "split: split_size can only be 0 if dimension size is 0");
  CHECK_THROWS_HG(hg::split(zeros({5}), std::vector<int64_t>{2, 2}), "split: sizes [2, 2] must add up to 5");
  CHECK_THROWS_HG(hg::split(zeros({5}), std::vector<int64_t>{6, -1}), "split: sizes must be non-negative");
  CHECK_THROWS_HG(hg::split(zeros({5}), 2, 1), "split");
  CHECK_THROWS_HG(hg::chunk(zeros({5}), 0), "chunk: expected the number of chunks to be greater than 0, got 0");
  CHECK_THROWS_HG(hg::rms_norm(zeros({2, 3}), {4}), "rms_norm: normalized_shape [4] must match the trailing dimensions");
  CHECK_THROWS_HG(hg::rms_norm(zeros({2, 3}), {3}, zeros({2})), "rms_norm: weight must have shape [3], got [2]");
  CHECK_THROWS_HG(hg::rms_norm(zeros({2, 3}, {.dtype = hg::i64}), {3}), "rms_norm: expected a floating input, got i64");
  CHECK_THROWS_HG(hg::nn::RMSNorm({3})(zeros({2, 4})), "rms_norm: normalized_shape [3]");
  // The edge cases PyTorch defines: an empty dim splits into one empty piece, chunks into n.
  CHECK(hg::split(zeros({0, 2}), 2).size() == 1);
  CHECK(hg::chunk(zeros({0, 2}), 3).size() == 3);
  CHECK(hg::chunk(zeros({6, 2}), 4).size() == 3);
}

TEST_CASE("ops.scenario07.attention_names_what_is_wrong") {
  using hg::zeros;
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  const auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, hg::ScaledDotProductAttentionOptions o = {}) {
    return hg::scaled_dot_product_attention(a, b, c, o);
  };
  CHECK_THROWS_HG(sdpa(zeros({4}), zeros({4}), zeros({4})), "scaled_dot_product_attention: expected q, k and v of one rank >= 2");
  CHECK_THROWS_HG(sdpa(q, zeros({6, 4}), v), "expected q, k and v of one rank >= 2");
  CHECK_THROWS_HG(sdpa(q, zeros({3, 6, 4}), zeros({3, 6, 3})), "q, k and v must have the same batch dims");
  CHECK_THROWS_HG(sdpa(q, zeros({2, 6, 5}), v), "q and k must have the same feature size, got 4 and 5");
  CHECK_THROWS_HG(sdpa(q, k, zeros({2, 7, 3})), "k and v must have the same length, got 6 and 7");
  CHECK_THROWS_HG(sdpa(q, k, v.to(hg::f64)), "expected q, k and v of one floating dtype, got f32, f32 and f64");
  CHECK_THROWS_HG(sdpa(q.to(hg::i64), k.to(hg::i64), v.to(hg::i64)), "of one floating dtype");
  CHECK_THROWS_HG(sdpa(q, k, v, {.dropout_p = 1.5}), "dropout_p must be in [0, 1], got 1.5");
  CHECK_THROWS_HG(sdpa(q, k, v, {.attn_mask = zeros({5, 6}), .is_causal = true}),
                  "an explicit attn_mask should not be set with is_causal = true");
  CHECK_THROWS_HG(sdpa(q, k, v, {.attn_mask = zeros({5, 7})}), "scaled_dot_product_attention");
  CHECK_THROWS_HG(sdpa(q, k, v, {.attn_mask = zeros({3, 5, 6})}), "scaled_dot_product_attention");
}

TEST_CASE("ops.scenario07.vision_ops_name_what_is_wrong") {
  using hg::zeros;
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 5, 5}), zeros({3, 2, 3})), "conv1d: input must be 3-D (N, C, L)");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 5}), zeros({3, 2, 3, 3})), "conv1d: weight must be 3-D");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 5}), zeros({3, 4, 3})), "conv1d: input has 2 channels");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 4, 5}), zeros({3, 2, 3}), {}, {.groups = 2}), "conv1d: groups (2)");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 2}), zeros({3, 2, 5})), "conv1d: the padded input (length 2) is shorter");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 5}), zeros({3, 2, 3}), {}, {.padding = -1}), "padding >= 0");
  CHECK_THROWS_HG(hg::conv1d(zeros({1, 2, 5}), zeros({3, 2, 3}), zeros({2})), "conv1d: bias must have shape [3]");
  CHECK_THROWS_HG(hg::conv_transpose2d(zeros({1, 2, 3, 3}), zeros({3, 2, 3, 3})), "conv_transpose2d: input has 2 channels");
  CHECK_THROWS_HG(hg::conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), {}, {.stride = 2, .output_padding = 2}),
                  "conv_transpose2d: output_padding (2) must be smaller than the stride (2) or the dilation (1)");
  CHECK_THROWS_HG(hg::conv_transpose2d(zeros({1, 2, 1, 1}), zeros({2, 2, 1, 1}), {}, {.padding = 1}),
                  "conv_transpose2d: the output would be -1x-1");
  CHECK_THROWS_HG(hg::conv_transpose2d(zeros({1, 3, 3, 3}), zeros({3, 2, 3, 3}), {}, {.groups = 2}), "groups (2)");
  CHECK_THROWS_HG(hg::conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 2, 3, 3}), zeros({3})),
                  "conv_transpose2d: bias must have shape [2]");
  CHECK_THROWS_HG(hg::prelu(zeros({2, 3, 4}), zeros({2})), "prelu: weight must have 1 element or one per channel (3");
  CHECK_THROWS_HG(hg::prelu(hg::arange(4, {.dtype = hg::i64}), zeros({1}, {.dtype = hg::i64})),
                  "prelu: expected floating tensors");
  CHECK_THROWS_HG(hg::group_norm(zeros({2, 6, 3}), 4), "group_norm: num_groups (4) must be >= 1 and divide the channels (6)");
  CHECK_THROWS_HG(hg::group_norm(zeros({2, 6, 3}), 2, zeros({3})), "group_norm: expected per-channel tensors of shape [6]");
  CHECK_THROWS_HG(hg::group_norm(zeros({6}), 2), "group_norm: input must be (N, C, ...)");
  CHECK_THROWS_HG(hg::instance_norm(zeros({2, 3})), "instance_norm: input must be (N, C, L)");
  CHECK_THROWS_HG(hg::instance_norm(zeros({2, 3, 1})), "expected more than 1 value per channel");
  CHECK_THROWS_HG(hg::instance_norm(zeros({2, 3, 4}), zeros({3})), "running_mean and running_var go together");
  CHECK_THROWS_HG(hg::instance_norm(zeros({2, 3, 4}), {}, {}, {}, {}, false),
                  "use_input_stats = false needs running_mean and running_var");
  const Tensor image = zeros({1, 2, 4, 4});
  CHECK_THROWS_HG(hg::interpolate(image, {}), "interpolate: give either size or scale_factor, not neither");
  CHECK_THROWS_HG(hg::interpolate(image, {.size = hg::Shape{2, 2}, .scale_factor = 2.0}), "not both");
  CHECK_THROWS_HG(hg::interpolate(image, {.scale_factor = 2.0, .mode = "bicubic"}),
                  "interpolate: mode must be \"nearest\" or \"bilinear\", got \"bicubic\"");
  CHECK_THROWS_HG(hg::interpolate(image, {.scale_factor = 2.0, .align_corners = true}),
                  "align_corners can only be set with mode \"bilinear\"");
  CHECK_THROWS_HG(hg::interpolate(image, {.scale_factor = 0.1}), "scale_factor 0.1 leaves an empty output from 4x4");
  CHECK_THROWS_HG(hg::interpolate(image, {.scale_factor = -2.0}), "scale_factor must be positive");
  CHECK_THROWS_HG(hg::interpolate(image, {.size = hg::Shape{3}}), "size must be two positive sizes");
  CHECK_THROWS_HG(hg::interpolate(zeros({2, 4, 4}), {.scale_factor = 2.0}), "interpolate: input must be 4-D");
  CHECK_THROWS_HG(hg::adaptive_max_pool2d(image, {0, 1}), "adaptive_max_pool2d: output_size must be two positive sizes");
  CHECK_THROWS_HG(hg::nn::GroupNorm(4, 6), "GroupNorm: num_groups (4) must be positive and divide num_channels (6)");
  CHECK_THROWS_HG(hg::nn::BatchNorm1d(3)(zeros({2, 3, 4, 4})), "BatchNorm1d: expected 2-D or 3-D input");
  CHECK_THROWS_HG(hg::nn::InstanceNorm2d(3)(zeros({2, 3, 4})), "InstanceNorm2d: expected 4-D input");
  CHECK_THROWS_HG(hg::nn::ConvTranspose2d(4, 6, 3, {.groups = 4}), "ConvTranspose2d: groups (4) must be positive");
  CHECK_THROWS_HG(hg::nn::PReLU(0), "PReLU: num_parameters must be positive");
}

// The out-of-range message names the op, the valid range for a 2-D tensor, and the dim given.
#define CHECK_DIM_ERROR(expr, op, got)                                                                    \
  do {                                                                                                    \
    const std::string needle_ = std::string(op) + ": dimension out of range (expected to be in range of " \
                                "[-2, 1], but got " + (got) + ")";                                        \
    CHECK_THROWS_HG(expr, needle_.c_str());                                                               \
  } while (0)

TEST_CASE("ops.scenario07.out_of_range_dims") {
  const Tensor x = hg::zeros({2, 3});
  CHECK_DIM_ERROR(hg::sum(x, {2}), "sum", "2");
  CHECK_DIM_ERROR(hg::mean(x, {-3}), "mean", "-3");
  CHECK_DIM_ERROR(hg::amax(x, 5), "amax", "5");
  CHECK_DIM_ERROR(hg::argmax(x, -3), "argmax", "-3");
  CHECK_DIM_ERROR(hg::softmax(x, 2), "softmax", "2");
  CHECK_DIM_ERROR(hg::log_softmax(x, -3), "log_softmax", "-3");
  CHECK_DIM_ERROR(x.transpose(0, 2), "transpose", "2");
  CHECK_DIM_ERROR(x.permute({0, 2}), "permute", "2");
  CHECK_THROWS_HG(x.permute({0}), "permute: got 1 dims [0] for a 2-d tensor");
  CHECK_THROWS_HG(x.permute({1, 1}), "permute: dimension 1 repeats");
  CHECK_DIM_ERROR(x.flatten(0, 2), "flatten", "2");
  CHECK_DIM_ERROR(hg::narrow(x, 2, 0, 1), "narrow", "2");
  CHECK_DIM_ERROR(hg::cat({x, x}, 2), "cat", "2");
  CHECK_THROWS_HG(hg::unsqueeze(x, 4), "unsqueeze: dimension out of range (expected to be in range of [-3, 2], but got 4)");
  CHECK_THROWS_HG(hg::sum(x, {0, -2}), "sum: dimension -2 appears more than once");
  CHECK_THROWS_HG(hg::softmax(hg::zeros({}), 1), "expected to be in range of [-1, 0], but got 1");
}

// ---- scenario 10: devices ---------------------------------------------------------------------------

TEST_CASE("ops.scenario10.requesting_cuda_without_a_device_throws" * doctest::skip(hg_test::cuda_available())) {
  CHECK_THROWS_HG(hg::zeros({2}, {.device = hg::Device::cuda()}), "cuda");
  CHECK_THROWS_HG(hg::ones({2, 3}).to(hg::Device::cuda()), "cuda");
  CHECK_THROWS_HG(hg::randn({2}, {.device = hg::Device::cuda()}), "cuda");
}

TEST_CASE("ops.scenario10.mixing_cpu_and_cuda_is_an_error" * doctest::skip(!hg_test::cuda_available())) {
  const hg::Device gpu = hg::Device::cuda();
  const Tensor cpu = hg::randn({4, 3}), cuda = hg::randn({4, 3}).to(gpu);
  const Tensor weight_cuda = hg::randn({5, 3}).to(gpu), targets = hg::zeros({4}, {.dtype = hg::i64});
  const int64_t cpu_bytes = hg::memory::allocated(), gpu_bytes = hg::memory::allocated(gpu);
  // No implicit copy: every op refuses, naming both devices.
  const std::vector<std::pair<const char*, std::function<Tensor()>>> calls = {
      {"add", [&] { return hg::add(cpu, cuda); }},
      {"mul", [&] { return hg::mul(cuda, cpu); }},
      {"matmul", [&] { return hg::matmul(cpu, cuda.t()); }},
      {"linear", [&] { return hg::linear(cpu, weight_cuda); }},
      {"mse_loss", [&] { return hg::mse_loss(cuda, cpu); }},
      {"cat", [&] { return hg::cat({cpu, cuda}, 0); }},
      {"cross_entropy", [&] { return hg::cross_entropy(cuda, targets); }},
      {"conv2d", [&] { return hg::conv2d(hg::randn({1, 3, 4, 4}), hg::randn({2, 3, 3, 3}).to(gpu)); }},
  };
  for (const auto& [name, call] : calls) {
    const std::string op = name;
    CAPTURE(op);
    std::string message;
    try {
      call();
    } catch (const hg::Error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(message.find("same device") != std::string::npos, message);
    CHECK_MESSAGE(message.find("cuda:0") != std::string::npos, message);
    CHECK_MESSAGE(message.find("cpu") != std::string::npos, message);
  }
  CHECK(hg::memory::allocated() == cpu_bytes);
  CHECK(hg::memory::allocated(gpu) == gpu_bytes);
}

// ---- scenario 11: dtype promotion -------------------------------------------------------------------

TEST_CASE("ops.scenario11.promotion_table_through_add_and_mul") {
  struct Row {
    hg::DType a, b, expected;
  };
  // PyTorch's table: integers < 16-bit floats < f32 < f64; u8 < i32 < i64; f16 with bf16 -> f32.
  const Row table[] = {
      {hg::f16, hg::f32, hg::f32},   {hg::bf16, hg::f16, hg::f32}, {hg::bf16, hg::f32, hg::f32},
      {hg::f32, hg::f64, hg::f64},   {hg::f16, hg::f64, hg::f64},  {hg::i64, hg::f16, hg::f16},
      {hg::i32, hg::bf16, hg::bf16}, {hg::u8, hg::i32, hg::i32},   {hg::i32, hg::i64, hg::i64},
      {hg::u8, hg::f32, hg::f32},    {hg::i64, hg::f32, hg::f32},  {hg::i64, hg::f64, hg::f64},
      {hg::f16, hg::f16, hg::f16},   {hg::bf16, hg::bf16, hg::bf16}, {hg::i64, hg::i64, hg::i64},
      {hg::u8, hg::u8, hg::u8},      {hg::i64, hg::u8, hg::i64},
  };
  // Operands every dtype holds exactly; floats get a fraction so truncation would show.
  const auto operand = [](hg::DType dtype, double first) {
    const double fraction = hg::is_floating(dtype) ? 0.5 : 0.0;
    return hg::from_vector(std::vector<double>{first + fraction, 2, 3 + fraction}, {3}, {.dtype = dtype});
  };
  for (const Row& r : table) {
    const std::string a_name(hg::dtype_name(r.a)), b_name(hg::dtype_name(r.b));
    CAPTURE(a_name);
    CAPTURE(b_name);
    const Tensor a = operand(r.a, 1), b = operand(r.b, 4);
    const std::vector<double> va = values(a), vb = values(b);
    std::vector<double> sum, product;
    for (size_t i = 0; i < 3; ++i) sum.push_back(va[i] + vb[i]), product.push_back(va[i] * vb[i]);
    for (const Tensor& y : {hg::add(a, b), hg::add(b, a), a + b}) {
      CHECK(y.dtype() == r.expected);
      CHECK(values(y) == sum);
    }
    for (const Tensor& y : {hg::mul(a, b), hg::mul(b, a), a * b}) {
      CHECK(y.dtype() == r.expected);
      CHECK(values(y) == product);
    }
  }
}

TEST_CASE("ops.scenario11.scalar_promotion_table") {
  struct Row {
    hg::DType tensor;
    const char* op;
    double scalar;
    hg::DType expected;
    double first_value;  // the result for the tensor element 3
  };
  // A scalar is "weak": it never widens a floating tensor; a fractional scalar turns an integer
  // tensor into f32; division is never integer.
  const Row table[] = {
      {hg::i64, "add", 2.0, hg::i64, 5.0},   {hg::i64, "add", 0.5, hg::f32, 3.5},
      {hg::i32, "mul", 2.5, hg::f32, 7.5},   {hg::i32, "mul", -2.0, hg::i32, -6.0},
      {hg::i64, "div", 2.0, hg::f32, 1.5},   {hg::u8, "mul", 3.0, hg::u8, 9.0},
      {hg::f16, "mul", 2.5, hg::f16, 7.5},   {hg::bf16, "add", 0.25, hg::bf16, 3.25},
      {hg::f32, "add", 0.1, hg::f32, 3.1f},  {hg::f64, "mul", 0.1, hg::f64, 3 * 0.1},
      {hg::f16, "div", 4.0, hg::f16, 0.75},
  };
  for (const Row& r : table) {
    const std::string tensor_name(hg::dtype_name(r.tensor)), op(r.op);
    CAPTURE(tensor_name);
    CAPTURE(op);
    CAPTURE(r.scalar);
    const Tensor t = hg::full({2}, 3.0, {.dtype = r.tensor});
    const Tensor y = op == "add" ? t + r.scalar : op == "mul" ? t * r.scalar : t / r.scalar;
    CHECK(y.dtype() == r.expected);
    CHECK(values(y)[0] == r.first_value);
  }
}

TEST_CASE("ops.scenario11.unsafe_downcast_into_an_existing_tensor_raises") {
  // PyTorch test_out Case 4: a floating result cannot be written into an integer tensor.
  Tensor counts = hg::zeros({3}, {.dtype = hg::i64});
  CHECK_THROWS_AS(counts.add_(hg::full({3}, 0.5)), hg::Error);
  CHECK(values(counts) == std::vector<double>{0, 0, 0});
  // Same-kind writes are fine: f64 into f32, integers into floats.
  Tensor x = hg::zeros({3});
  x.add_(hg::full({3}, 0.5, {.dtype = hg::f64}));
  x.add_(hg::ones({3}, {.dtype = hg::i64}));
  CHECK(values(x) == std::vector<double>{1.5, 1.5, 1.5});
}

// ---- scenarios 12 and 13: cross_entropy targets -----------------------------------------------------

TEST_CASE("ops.scenario12.cross_entropy_target_out_of_bounds_throws") {
  const Tensor logits = hg::randn({3, 5});
  const auto targets = [](std::vector<int64_t> t) { return hg::from_vector(t, {int64_t(t.size())}); };
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({0, 7, 1})), "Target 7 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({5, 0, 1})), "Target 5 is out of bounds");  // == C
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({0, 1, -1})), "Target -1 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({-100, -2, 1})), "Target -2 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({0, 9, 1}), {.label_smoothing = 0.1}), "Target 9 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits.to(hg::f16), targets({0, 6, 1})), "Target 6 is out of bounds");
  // The message says how many classes there are.
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({0, 7, 1})), "5 classes");
  // ignore_index itself is fine, wherever it points; other negatives are not.
  CHECK_NOTHROW(hg::cross_entropy(logits, targets({-1, 0, 4}), {.ignore_index = -1}));
  CHECK_NOTHROW(hg::cross_entropy(logits, targets({7, 0, 4}), {.ignore_index = 7}));
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({-2, 0, 4}), {.ignore_index = -1}), "Target -2 is out of bounds");
  CHECK_THROWS_HG(hg::cross_entropy(logits, targets({-100, 0, 4}), {.ignore_index = -1}), "Target -100 is out of bounds");
  // Nothing was recorded: a failed call leaves no graph behind for a requires-grad input.
  const Tensor leaf = hg::randn({3, 5}).requires_grad_();
  CHECK_THROWS_HG(hg::cross_entropy(leaf, targets({3, 3, 8})), "Target 8 is out of bounds");
  CHECK_FALSE(leaf.grad().defined());
}

TEST_CASE("ops.scenario13.cross_entropy_with_no_counted_row_is_nan") {
  // ops/loss.h documents the choice: with no non-ignored sample the mean is 0/0 = NaN (PyTorch).
  const Tensor logits = hg::randn({3, 5}).requires_grad_();
  const Tensor all_ignored = hg::full({3}, -100.0, {.dtype = hg::i64});
  const Tensor loss = hg::cross_entropy(logits, all_ignored);
  CHECK(loss.shape() == hg::Shape{});
  CHECK(std::isnan(loss.item<float>()));
  CHECK(std::isnan(hg::cross_entropy(logits, all_ignored, {.label_smoothing = 0.1}).item<float>()));
  CHECK(std::isnan(hg::cross_entropy(logits, hg::full({3}, 2.0, {.dtype = hg::i64}), {.ignore_index = 2}).item<float>()));
  // Backward does not crash; ignored rows get zero gradient, as in PyTorch.
  loss.backward();
  REQUIRE(logits.grad().defined());
  CHECK(values(logits.grad()) == std::vector<double>(15, 0.0));
  // An empty batch.
  const Tensor empty_logits = hg::zeros({0, 5}).requires_grad_();
  const Tensor empty_loss = hg::cross_entropy(empty_logits, hg::zeros({0}, {.dtype = hg::i64}));
  CHECK(std::isnan(empty_loss.item<float>()));
  empty_loss.backward();
  CHECK(empty_logits.grad().shape() == hg::Shape{0, 5});
  CHECK(std::isnan(hg::cross_entropy(hg::zeros({0, 5}, {.dtype = hg::f16}), hg::zeros({0}, {.dtype = hg::i64})).item<float>()));
}
