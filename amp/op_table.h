// The one op table. Every built-in op that goes through autocast has a row here: its name (what
// policy_table(), PrecisionReport and ShadowCheck show), its default cast policy, why, and the
// dtype rule of its output. Ops name themselves by enum, so a typo is a compile error:
//
//   auto [x, w, b] = amp::prepare(amp::Op::Linear, x_in, w_in, b_in);
//
// amp::policy_table(), docs/amp.md's table (tests/print_policy_table.cpp checks it) and the tests
// that enumerate ops all read this table. amp::set_policy can override a row at run time; custom
// ops are not here: they are keyed by name (amp/policy.h). To add an op: add its enumerator (amp/op.h)
// and its row here (the rows follow the enum's order), and call amp::prepare(Op::...) and
// record(Op::..., ...). Only the files that read the rows include this header, so a new row
// rebuilds them and the files that name an Op, not the whole library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "amp/cast_policy.h"
#include "amp/op.h"
#include "core/dtype.h"

namespace hg::amp {

// The dtype of an op's output, from its floating inputs after the cast.
enum class OutputDType : uint8_t {
  Computed,    // the dtype the op computed in: its inputs' widest dtype
  FirstInput,  // the first input's (batch_norm: f32 affine parameters, the activation stays 16-bit)
  Index,       // i64 indices, whatever the inputs (argmax)
};

struct OpInfo {
  Op op;
  std::string_view name;   // "linear"; the key of set_policy, the row of reports
  CastPolicy policy;       // the default; amp::set_policy may override it
  OutputDType output;
  std::string_view why;    // in a few words
  // false: a view or copy (reshape, permute, ...). It has a row for its identity -- the name its
  // autograd node carries -- but never goes through amp::prepare (there is nothing to cast), so it
  // has no policy to set and no PrecisionReport row.
  bool autocasts = true;
};

namespace why {
inline constexpr std::string_view kGemm = "GEMM: tensor cores on GPUs, AVX512-BF16 on CPUs, f32 accumulation";
inline constexpr std::string_view kRange = "needs f32 range or accuracy";
inline constexpr std::string_view kRowSum = "exp and a sum over a row";
inline constexpr std::string_view kLongSum = "long sums lose 16-bit precision";
inline constexpr std::string_view kKept = "runs in the dtype it receives (PyTorch's default)";
inline constexpr std::string_view kLayout = "moves or copies values: no arithmetic";
}  // namespace why

inline constexpr OpInfo kOpTable[] = {
    {Op::Matmul, "matmul", CastPolicy::Lower, OutputDType::Computed, why::kGemm},
    {Op::Linear, "linear", CastPolicy::Lower, OutputDType::Computed, why::kGemm},
    {Op::Conv2d, "conv2d", CastPolicy::Lower, OutputDType::Computed, why::kGemm},
    {Op::Conv1d, "conv1d", CastPolicy::Lower, OutputDType::Computed, why::kGemm},
    {Op::ConvTranspose2d, "conv_transpose2d", CastPolicy::Lower, OutputDType::Computed, why::kGemm},
    // NOTE: prelu is on PyTorch's lower-precision list (CPU and CUDA) though it is no GEMM: its
    // weight is cast with the activation, and the output stays 16-bit.
    {Op::Prelu, "prelu", CastPolicy::Lower, OutputDType::Computed, "PyTorch's list: keeps activations 16-bit"},
    {Op::ScaledDotProductAttention, "scaled_dot_product_attention", CastPolicy::Lower, OutputDType::Computed,
     "two GEMMs; the softmax between them runs in f32 inside"},
    {Op::Exp, "exp", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Log, "log", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Pow, "pow", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Sqrt, "sqrt", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Reciprocal, "reciprocal", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Rsqrt, "rsqrt", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Log1p, "log1p", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Expm1, "expm1", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Softplus, "softplus", CastPolicy::F32, OutputDType::Computed, why::kRange},
    {Op::Softmax, "softmax", CastPolicy::F32, OutputDType::Computed, why::kRowSum},
    {Op::LogSoftmax, "log_softmax", CastPolicy::F32, OutputDType::Computed, why::kRowSum},
    {Op::CrossEntropy, "cross_entropy", CastPolicy::F32, OutputDType::Computed, "loss: log-sum-exp and a mean"},
    {Op::NllLoss, "nll_loss", CastPolicy::F32, OutputDType::Computed, "loss: a weighted mean"},
    {Op::MseLoss, "mse_loss", CastPolicy::F32, OutputDType::Computed, "loss: squares and a mean"},
    {Op::L1Loss, "l1_loss", CastPolicy::F32, OutputDType::Computed, "loss: a mean"},
    {Op::SmoothL1Loss, "smooth_l1_loss", CastPolicy::F32, OutputDType::Computed, "loss: squares and a mean"},
    {Op::HuberLoss, "huber_loss", CastPolicy::F32, OutputDType::Computed, "loss: squares and a mean"},
    // NOTE: PyTorch's CUDA autocast bans binary_cross_entropy (log of a 16-bit probability near 0
    // or 1); its CPU list runs it in f32, which removes the hazard: halfgrad follows the CPU list.
    {Op::BinaryCrossEntropy, "binary_cross_entropy", CastPolicy::F32, OutputDType::Computed, "loss: logs and a mean"},
    {Op::BinaryCrossEntropyWithLogits, "binary_cross_entropy_with_logits", CastPolicy::F32, OutputDType::Computed,
     "loss: logs and a mean"},
    {Op::KlDiv, "kl_div", CastPolicy::F32, OutputDType::Computed, "loss: logs and a sum"},
    {Op::Sum, "sum", CastPolicy::F32, OutputDType::Computed, why::kLongSum},
    {Op::Mean, "mean", CastPolicy::F32, OutputDType::Computed, why::kLongSum},
    {Op::LayerNorm, "layer_norm", CastPolicy::F32, OutputDType::Computed, "statistics over a row"},
    {Op::GroupNorm, "group_norm", CastPolicy::F32, OutputDType::Computed, "statistics over a group"},
    {Op::Interpolate, "interpolate", CastPolicy::F32, OutputDType::Computed, "PyTorch's list: upsample_* in f32"},
    {Op::Prod, "prod", CastPolicy::F32, OutputDType::Computed, "products of many values leave 16-bit range"},
    {Op::Logsumexp, "logsumexp", CastPolicy::F32, OutputDType::Computed, why::kRowSum},
    {Op::Norm, "norm", CastPolicy::F32, OutputDType::Computed, why::kLongSum},
    {Op::Cumsum, "cumsum", CastPolicy::F32, OutputDType::Computed, why::kLongSum},
    {Op::Cat, "cat", CastPolicy::Promote, OutputDType::Computed, "several inputs: meet in the widest dtype"},
    {Op::ScatterAdd, "scatter_add", CastPolicy::Promote, OutputDType::Computed, "adds src into x: meet in the widest dtype"},
    // NOTE: batch_norm keeps the activation dtype (so activations stay 16-bit), but its batch
    // statistics, running stats and affine math are always computed in f32 inside the kernel.
    {Op::BatchNorm, "batch_norm", CastPolicy::Keep, OutputDType::FirstInput,
     "statistics computed in f32 inside; output keeps input dtype"},
    {Op::Add, "add", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Sub, "sub", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Mul, "mul", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Div, "div", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Where, "where", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Neg, "neg", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Abs, "abs", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Clamp, "clamp", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Relu, "relu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::LeakyRelu, "leaky_relu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Gelu, "gelu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Silu, "silu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Sigmoid, "sigmoid", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Tanh, "tanh", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Amax, "amax", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Argmax, "argmax", CastPolicy::Keep, OutputDType::Index, why::kKept},
    {Op::MaxPool2d, "max_pool2d", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::AvgPool2d, "avg_pool2d", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::AdaptiveAvgPool2d, "adaptive_avg_pool2d", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Dropout, "dropout", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Embedding, "embedding", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Relu6, "relu6", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Hardtanh, "hardtanh", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Hardsigmoid, "hardsigmoid", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Hardswish, "hardswish", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Elu, "elu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Selu, "selu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Celu, "celu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Mish, "mish", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Softsign, "softsign", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::LogSigmoid, "logsigmoid", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::AdaptiveMaxPool2d, "adaptive_max_pool2d", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    // Like batch_norm: statistics in f32 inside, the activation keeps its dtype.
    {Op::InstanceNorm, "instance_norm", CastPolicy::Keep, OutputDType::FirstInput,
     "statistics computed in f32 inside; output keeps input dtype"},
    // Attention masks: a choice per element, exact in every dtype.
    {Op::MaskedFill, "masked_fill", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Tril, "tril", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Triu, "triu", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    // Not on PyTorch's lists; computed in f32 inside like layer_norm, then scaled by the weight.
    {Op::RmsNorm, "rms_norm", CastPolicy::Keep, OutputDType::Computed, "statistics computed in f32 inside"},
    {Op::Erf, "erf", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Sin, "sin", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Cos, "cos", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Sign, "sign", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Floor, "floor", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Ceil, "ceil", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Round, "round", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Maximum, "maximum", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Minimum, "minimum", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    // Indexing and rearranging: copies (scatter_add's sums aside), exact in every dtype.
    {Op::IndexSelect, "index_select", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Gather, "gather", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Flip, "flip", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Roll, "roll", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Repeat, "repeat", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    // NOTE: PyTorch's CPU autocast list runs reflection/replication pads in f32; its CUDA list
    // (the one halfgrad follows) keeps the dtype: padding copies values, it does no arithmetic.
    {Op::Pad, "pad", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    // Sorting and selecting: the values are gathered, exact in every dtype.
    {Op::Sort, "sort", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Topk, "topk", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Max, "max", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Min, "min", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Amin, "amin", CastPolicy::Keep, OutputDType::Computed, why::kKept},
    {Op::Argmin, "argmin", CastPolicy::Keep, OutputDType::Index, why::kKept},
    // Not on PyTorch's lists; computed in f32 inside for 16-bit inputs, rounded once.
    {Op::Var, "var", CastPolicy::Keep, OutputDType::Computed, "computed in f32 inside; output keeps input dtype"},
    {Op::Std, "std", CastPolicy::Keep, OutputDType::Computed, "computed in f32 inside; output keeps input dtype"},
    // Views and copies record a node too (their backward moves gradients back); nothing to cast.
    {Op::View, "view", CastPolicy::Keep, OutputDType::Computed, why::kLayout, false},
    {Op::Permute, "permute", CastPolicy::Keep, OutputDType::Computed, why::kLayout, false},
    {Op::Expand, "expand", CastPolicy::Keep, OutputDType::Computed, why::kLayout, false},
    {Op::Narrow, "narrow", CastPolicy::Keep, OutputDType::Computed, why::kLayout, false},
    {Op::Clone, "clone", CastPolicy::Keep, OutputDType::Computed, why::kLayout, false},
};
inline constexpr size_t kNumOps = std::size(kOpTable);

namespace detail {
constexpr bool rows_follow_the_enum() {
  for (size_t i = 0; i < kNumOps; ++i)
    if (static_cast<size_t>(kOpTable[i].op) != i) return false;
  return true;
}
}  // namespace detail
// Row i describes Op(i), and the last row is the last enumerator: every Op has exactly one row.
static_assert(detail::rows_follow_the_enum(), "kOpTable: the rows must follow enum class Op's order");
static_assert(kOpTable[kNumOps - 1].op == Op::Clone, "kOpTable: every Op needs a row (update this check when you "
                                                     "add an enumerator at the end)");

constexpr const OpInfo& op_info(Op op) { return kOpTable[static_cast<size_t>(op)]; }

// The built-in op called `name`, if there is one.
constexpr std::optional<Op> find_op(std::string_view name) {
  for (const OpInfo& row : kOpTable)
    if (row.name == name) return row.op;
  return std::nullopt;
}

constexpr DType output_dtype(OutputDType rule, DType compute, DType first_input) {
  switch (rule) {
    case OutputDType::Computed: return compute;
    case OutputDType::FirstInput: return first_input;
    case OutputDType::Index: return i64;
  }
  return compute;
}
constexpr std::string_view output_dtype_name(OutputDType rule) {
  switch (rule) {
    case OutputDType::Computed: return "the dtype it computes in";
    case OutputDType::FirstInput: return "its first input's dtype";
    case OutputDType::Index: return "i64 indices";
  }
  return "?";
}

}  // namespace hg::amp
