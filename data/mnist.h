// MNIST and Fashion-MNIST: 28x28 grayscale images (u8) with labels 0..9, read from the four IDX
// files (plain or .gz) in a root directory: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
//
//   hg::data::FashionMNIST train;                          // /usr/share/datasets/fashion-mnist
//   hg::data::FashionMNIST test("", {.train = false});     // or $HG_DATA, or a root you pass
//
// The root is, in order: the argument, the HG_DATA environment variable, the default
// (Fashion-MNIST: Debian's dataset-fashion-mnist package location).
//
// As a Dataset, example i is x f32 (1, 28, 28) with the pixels / 255 in [0, 1] and y the i64
// class (0-d); a batch of them is made in one pass over the bytes.
#pragma once
#include <string>

#include "core/tensor.h"
#include "data/dataset.h"

namespace hg::data {

struct MNISTOptions {
  bool train = true;
};

class MNIST : public Dataset {
 public:
  explicit MNIST(const std::string& root = "", MNISTOptions options = {});

  int64_t size() const override { return images_.shape()[0]; }
  Example get(int64_t index) const override;
  std::optional<Example> get_batch(const std::vector<int64_t>& indices) const override;
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
