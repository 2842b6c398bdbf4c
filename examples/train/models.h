// The models hg-train knows, each a Sequential so that its state-dict keys are those of the same
// torch.nn.Sequential (bench/py/models.py builds them in PyTorch, tests/test_model_parity.cpp
// loads PyTorch's weights into them):
//   mlp:       Flatten, Linear 784->256, ReLU, Linear 256->128, ReLU, Linear 128->10
//   cnn:       Conv 1->16 3x3 pad 1, ReLU, MaxPool 2, Conv 16->32 3x3 pad 1, ReLU, MaxPool 2,
//              Flatten, Linear 1568->10
//   mnist-net: the Net of PyTorch's MNIST example: Conv 1->32 3x3, ReLU, Conv 32->64 3x3, ReLU,
//              MaxPool 2, Dropout 0.25, Flatten, Linear 9216->128, ReLU, Dropout 0.5,
//              Linear 128->10 (its log_softmax + nll_loss is hg-train's cross_entropy)
//   resnet:    ResNet-20 as He et al. built it for CIFAR: a 3x3 stem with 16 channels, 3 stages of
//              3 BasicBlocks (16, 32, 64 channels, stride 2 into stages 2 and 3, a 1x1 conv + BN
//              shortcut where the shape changes), adaptive average pool, Linear 64->10
//   mobilenet: a MobileNetV2-tiny: a 3x3 stem, 7 InvertedResiduals (expansion 6, depthwise 3x3,
//              ReLU6, linear bottlenecks, residual where the shape allows), 1x1 conv to 128,
//              adaptive average pool, Linear 128->10
#pragma once
#include <string>

#include "halfgrad.h"

namespace hg_train {

// conv3x3-BN-ReLU-conv3x3-BN plus the shortcut, then ReLU. Children as torchvision names them
// (conv1, bn1, conv2, bn2) and the projection shortcut as "shortcut" (a Sequential: 0 conv, 1 BN).
class BasicBlock : public hg::nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  hg::Tensor forward(const hg::Tensor& x) override;

  hg::nn::Conv2d conv1, conv2;
  hg::nn::BatchNorm2d bn1, bn2;
  hg::nn::Sequential shortcut;  // empty: the identity
};

// MobileNetV2's block: 1x1 expand (skipped when expansion is 1), BN, ReLU6, depthwise 3x3 with
// the stride, BN, ReLU6, 1x1 project, BN (no activation: the linear bottleneck); x added back
// when stride is 1 and the channels match. Its layers sit in "conv", a Sequential, as in
// torchvision.
class InvertedResidual : public hg::nn::Module {
 public:
  InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expansion);
  hg::Tensor forward(const hg::Tensor& x) override;

  hg::nn::Sequential conv;
  bool residual;
};

// `dropout` is the models' dropout probability scale: 1 keeps mnist-net's 0.25 and 0.5, 0 turns
// them off (the parity test: PyTorch's masks cannot be reproduced).
hg::nn::Sequential make_model(const std::string& name, double dropout = 1.0);

// The names make_model knows, for --model's help and checks.
inline const char* const kModelNames[] = {"mlp", "cnn", "mnist-net", "resnet", "mobilenet"};
// The text models (train/text_models.h), trained by train/text_trainer.h instead.
inline const char* const kTextModelNames[] = {"gpt", "lstm"};
inline bool is_text_model(const std::string& name) {
  for (const char* text : kTextModelNames)
    if (name == text) return true;
  return false;
}

}  // namespace hg_train
