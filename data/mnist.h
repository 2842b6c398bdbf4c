// MNIST and Fashion-MNIST: 28x28 grayscale images (u8) with labels 0..9, read from the four IDX
// files (plain or .gz) in a root directory: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
//
//   hg::data::FashionMNIST train;                          // /usr/share/datasets/fashion-mnist
//   hg::data::FashionMNIST test("", {.train = false});     // or $HG_DATA, or a root you pass
//
// The root is, in order: the argument, the HG_DATA environment variable, the default
// (Fashion-MNIST: Debian's dataset-fashion-mnist package location).
#pragma once
#include <string>

#include "core/tensor.h"

namespace hg::data {

struct MNISTOptions {
  bool train = true;
};

class MNIST {
 public:
  explicit MNIST(const std::string& root = "", MNISTOptions options = {});

  int64_t size() const { return images_.shape()[0]; }
  const Tensor& images() const { return images_; }  // u8 (N, 28, 28)
  const Tensor& labels() const { return labels_; }  // i64 (N), values in [0, 9]
  const std::string& root() const { return root_; }
  // The first n samples (a view: no copy), for quick runs and smoke tests.
  MNIST head(int64_t n) const;

 protected:
  MNIST(const std::string& name, const std::string& root, const std::string& default_root, const std::string& package,
        MNISTOptions options);
  struct Empty {};
  explicit MNIST(Empty) {}

 private:
  std::string root_;
  Tensor images_, labels_;
};

class FashionMNIST : public MNIST {
 public:
  explicit FashionMNIST(const std::string& root = "", MNISTOptions options = {});
};

inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

}  // namespace hg::data
