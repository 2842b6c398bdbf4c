// hg-train's models.
#include "train/models.h"

namespace hg_train {

using namespace hg::nn;

// ---- ResNet ------------------------------------------------------------------------------------

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride)
    : conv1(in, out, 3, {.stride = stride, .padding = 1, .bias = false}),
      conv2(out, out, 3, {.padding = 1, .bias = false}),
      bn1(out),
      bn2(out) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (stride != 1 || in != out) {
    shortcut = Sequential{Conv2d(in, out, 1, {.stride = stride, .bias = false}), BatchNorm2d(out)};
    register_module("shortcut", shortcut);
  }
}

hg::Tensor BasicBlock::forward(const hg::Tensor& x) {
  // relu(bn1(..)) and relu(bn2(..) + shortcut) run as batch_norm's epilogue (ops/epilogue.h):
  // one pass over the activations each, instead of two and four
  const hg::Tensor y = conv2(bn1.forward(conv1(x), hg::Epilogue::Relu));
  return bn2.forward(y, hg::Epilogue::Relu, shortcut.size() > 0 ? shortcut(x) : x);
}

namespace {

Sequential resnet20() {
  // fuse: the stem's BatchNorm2d -> ReLU runs as one op (nn/fuse.h)
  Sequential model = fuse(Sequential{Conv2d(1, 16, 3, {.padding = 1, .bias = false}), BatchNorm2d(16), ReLU()});
  int64_t channels = 16;
  for (const int64_t width : {16, 32, 64})
    for (int block = 0; block < 3; ++block) {
      const int64_t stride = block == 0 && width != 16 ? 2 : 1;
      model.push_back(BasicBlock(channels, width, stride));
      channels = width;
    }
  model.push_back(AdaptiveAvgPool2d({1, 1}));
  model.push_back(Flatten());
  model.push_back(Linear(64, 10));
  return model;
}

}  // namespace

// ---- MobileNetV2 -------------------------------------------------------------------------------

InvertedResidual::InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expansion)
    : residual(stride == 1 && in == out) {
  const int64_t hidden = in * expansion;
  if (expansion != 1) {
    conv.push_back(Conv2d(in, hidden, 1, {.bias = false}));
    conv.push_back(BatchNorm2d(hidden));
    conv.push_back(ReLU6());
  }
  conv.push_back(Conv2d(hidden, hidden, 3, {.stride = stride, .padding = 1, .groups = hidden, .bias = false}));
  conv.push_back(BatchNorm2d(hidden));
  conv.push_back(ReLU6());
  conv.push_back(Conv2d(hidden, out, 1, {.bias = false}));
  conv.push_back(BatchNorm2d(out));
  // fuse: each BatchNorm2d -> ReLU6 runs as one op, batch_norm's Relu6 epilogue (nn/fuse.h)
  conv = fuse(conv);
  register_module("conv", conv);
}

hg::Tensor InvertedResidual::forward(const hg::Tensor& x) { return residual ? x + conv(x) : conv(x); }

namespace {

Sequential mobilenet_v2_tiny() {
  Sequential model{Conv2d(1, 16, 3, {.padding = 1, .bias = false}), BatchNorm2d(16), ReLU6()};
  // (expansion, channels, blocks, first stride) per stage, MobileNetV2's table cut to 28x28 input:
  // 28x28 -> 14x14 -> 7x7.
  struct Stage {
    int64_t expansion, channels, blocks, stride;
  };
  int64_t channels = 16;
  for (const Stage& stage : {Stage{1, 16, 1, 1}, Stage{6, 24, 2, 2}, Stage{6, 32, 2, 2}, Stage{6, 64, 2, 1}})
    for (int64_t block = 0; block < stage.blocks; ++block) {
      model.push_back(InvertedResidual(channels, stage.channels, block == 0 ? stage.stride : 1, stage.expansion));
      channels = stage.channels;
    }
  model.push_back(Conv2d(channels, 128, 1, {.bias = false}));
  model.push_back(BatchNorm2d(128));
  model.push_back(ReLU6());
  model.push_back(AdaptiveAvgPool2d({1, 1}));
  model.push_back(Flatten());
  model.push_back(Linear(128, 10));
  return fuse(model);  // the stem's and the head's BatchNorm2d -> ReLU6
}

}  // namespace

// Fused (nn::fuse): each Linear/Conv2d -> ReLU pair runs as one op with a ReLU epilogue, the
// same results with one pass less over the activations.
hg::nn::Sequential make_model(const std::string& name, double dropout) {
  HG_CHECK(dropout >= 0 && dropout <= 1, "make_model: the dropout scale must be in [0, 1], got ", dropout);
  if (name == "mlp")
    return fuse(Sequential{Flatten(), Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10)});
  if (name == "cnn")
    return fuse(Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, {.padding = 1}),
                           ReLU(), MaxPool2d(2), Flatten(), Linear(32 * 7 * 7, 10)});
  if (name == "mnist-net")
    return fuse(Sequential{Conv2d(1, 32, 3), ReLU(), Conv2d(32, 64, 3), ReLU(), MaxPool2d(2),
                           Dropout(0.25 * dropout), Flatten(), Linear(9216, 128), ReLU(), Dropout(0.5 * dropout),
                           Linear(128, 10)});
  if (name == "resnet") return resnet20();
  if (name == "mobilenet") return mobilenet_v2_tiny();
  HG_FAIL("unknown model \"", name, "\" (expected mlp, cnn, mnist-net, resnet or mobilenet)");
}

}  // namespace hg_train
