// halfgrad: a from-scratch deep-learning framework in C++20 with mixed precision built in.
//
//   #include <halfgrad/halfgrad.h>
//
//   hg::manual_seed(0);
//   hg::nn::Sequential model{hg::nn::Linear(784, 256), hg::nn::ReLU(), hg::nn::Linear(256, 10)};
//   hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
//   hg::amp::GradScaler scaler;
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     hg::Tensor loss;
//     { hg::amp::Autocast ac(hg::f16);            // matmul/linear/conv in f16, softmax/loss in f32
//       loss = hg::cross_entropy(model(x.flatten(1)), y); }
//     scaler.scale(loss).backward();              // scaled, so small f16 gradients survive
//     scaler.step(opt);                           // unscales; skips the update on inf/NaN
//     scaler.update();                            // grows or backs off the scale
//   }
//
// Layers, bottom up: core/ (tensors, dtypes, memory, RNG, safetensors), autograd/, ops/, amp/,
// nn/, optim/, data/, distributed/. docs/architecture.md walks through them.
#pragma once

#include "core/checkpoint.h"
#include "core/cpu_features.h"
#include "core/determinism.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/state_dict.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/tensor.h"

#include "autograd/anomaly.h"
#include "ops/function.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/checkpoint.h"
#include "ops/compare.h"
#include "ops/conv.h"
#include "core/cuda/gemm_settings.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/indexing.h"
#include "ops/epilogue.h"
#include "ops/interpolate.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/masking.h"
#include "ops/math.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/sort.h"
#include "ops/statistics.h"
#include "ops/stochastic_round.h"
#include "ops/softmax.h"

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "amp_tools/grad_scaler.h"
#include "amp_tools/gradient_histogram.h"
#include "amp/precision_report.h"
#include "amp/policy.h"
#include "amp_tools/shadow_check.h"

#include "nn/nn.h"
#include "optim/optim.h"
#include "data/data.h"
#include "distributed/distributed.h"
