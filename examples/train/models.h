// The two models hg-train knows, as the issue and the LibTorch comparison define them:
//   mlp: Flatten, Linear 784->256, ReLU, Linear 256->128, ReLU, Linear 128->10
//   cnn: Conv 1->16 3x3 pad 1, ReLU, MaxPool 2, Conv 16->32 3x3 pad 1, ReLU, MaxPool 2,
//        Flatten, Linear 1568->10
#pragma once
#include <string>

#include "halfgrad.h"

namespace hg_train {

hg::nn::Sequential make_model(const std::string& name);

}  // namespace hg_train
