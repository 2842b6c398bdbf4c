// hg-train's models.
#include "train/models.h"

namespace hg_train {

// Fused (nn::fuse): each Linear/Conv2d -> ReLU pair runs as one op with a ReLU epilogue, the
// same results with one pass less over the activations.
hg::nn::Sequential make_model(const std::string& name) {
  using namespace hg::nn;
  if (name == "mlp")
    return fuse(Sequential{Flatten(), Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10)});
  if (name == "cnn")
    return fuse(Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, {.padding = 1}),
                           ReLU(), MaxPool2d(2), Flatten(), Linear(32 * 7 * 7, 10)});
  HG_FAIL("unknown model \"", name, "\" (expected mlp or cnn)");
}

}  // namespace hg_train
