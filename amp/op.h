// The built-in ops: one enumerator each, the op's identity everywhere (amp::prepare, record, the
// reports, the tests). Each has its row -- name, cast policy, output dtype, why -- in
// amp/op_table.h, in this order. Headers that only pass an Op along declare it without its
// enumerators (`enum class Op : uint8_t;`), so adding one rebuilds only what names one.
#pragma once
#include <cstdint>
#include <string_view>

namespace hg::amp {

// Grouped by default policy, as the tables print.
enum class Op : uint8_t {
  Matmul, Linear, Conv2d, Conv1d, ConvTranspose2d, Prelu, ScaledDotProductAttention,   // Lower
  Exp, Log, Pow, Sqrt, Reciprocal, Rsqrt, Log1p, Expm1, Softplus, Softmax, LogSoftmax,       // F32
  CrossEntropy, NllLoss, MseLoss,
  L1Loss, SmoothL1Loss, HuberLoss, BinaryCrossEntropy, BinaryCrossEntropyWithLogits, KlDiv,
  Sum, Mean, LayerNorm, GroupNorm, Interpolate, Prod, Logsumexp, Norm, Cumsum,
  Cat, ScatterAdd,                                                                     // Promote
  BatchNorm, Add, Sub, Mul, Div, Where, Neg, Abs, Clamp, Relu, LeakyRelu, Gelu, Silu, Sigmoid, // Keep
  Tanh, Amax, Argmax, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Dropout, Embedding,
  Relu6, Hardtanh, Hardsigmoid, Hardswish, Elu, Selu, Celu, Mish, Softsign, LogSigmoid,
  AdaptiveMaxPool2d, InstanceNorm, MaskedFill, Tril, Triu, RmsNorm, Erf, Sin, Cos, Sign, Floor, Ceil,
  Round, Maximum, Minimum, IndexSelect, Gather, Flip, Roll, Repeat, Pad, Sort, Topk, Max, Min, Amin,
  Argmin, Var, Std,
  View, Permute, Expand, Narrow, Clone,                                                 // Keep: layout
};

// The op's name (its row's): "linear".
std::string_view op_name(Op op);

}  // namespace hg::amp
