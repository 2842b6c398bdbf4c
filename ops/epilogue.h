// Epilogue: an activation a GEMM-like op (or batch_norm) applies to its output before anyone reads
// it, saving one pass over the activations. The op stays the op the user called -- linear, conv2d
// or batch_norm, under that op's cast policy and PrecisionReport row -- and the result equals the
// unfused pair, NaN included:
//
//   hg::linear(x, w, b, {.epilogue = hg::Epilogue::Relu})   ==  hg::relu(hg::linear(x, w, b))
//   hg::linear(x, w, b, {.epilogue = hg::Epilogue::Gelu})   ==  hg::gelu(hg::linear(x, w, b))
//   hg::conv2d(x, w, b, {.padding = 1, .epilogue = hg::Epilogue::Relu})
//   hg::batch_norm(x, mean, var, w, b, training, momentum, eps, hg::Epilogue::Relu)
//   hg::batch_norm(x, mean, var, w, b, training, momentum, eps, hg::Epilogue::Relu6)  // relu6(..)
//
// nn::fuse (nn/fuse.h) uses it for the Linear->ReLU, Linear->GELU, Conv2d->ReLU, BatchNorm->ReLU
// and BatchNorm->ReLU6 pairs of a Sequential; a transformer's MLP calls linear with the GELU epilogue
// itself, a ResNet block batch_norm with the ReLU one.
#pragma once
#include <cstdint>

namespace hg {

enum class Epilogue : uint8_t {
  None,
  Relu,  // max(y, 0) with relu's own functor: NaN stays NaN (cuBLASLt's RELU epilogue would give 0)
  Gelu,  // linear only: the exact (erf) GELU, gelu()'s own kernels; the backward keeps y before it
  Relu6,  // batch_norm only: min(max(y, 0), 6) with relu6's (hardtanh's) functor, MobileNetV2's activation
};

}  // namespace hg
