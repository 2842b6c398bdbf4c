// CIFAR-10 in its binary format: 32x32 colour images in 10 classes, from the files
// data_batch_1.bin .. data_batch_5.bin (training, 50 000 images) or test_batch.bin (10 000) in a
// root directory (or in its cifar-10-batches-bin/ folder, as the archive unpacks). Each record
// is one label byte and 3072 pixel bytes (the red, green and blue 32x32 planes).
//
//   hg::data::CIFAR10 train("/data/cifar10", {.train = true});
//   hg::data::DataLoader loader(train, {.batch_size = 128, .transform = hg::data::RandomCrop(32, {.padding = 4})});
//
// Example i is x f32 (3, 32, 32) with the pixels / 255 in [0, 1] and y the i64 class (0-d).
// The root is the argument or, when empty, the HG_DATA environment variable.
#pragma once
#include <string>

#include "data/dataset.h"

namespace hg::data {

struct CIFAR10Options {
  bool train = true;
};

class CIFAR10 : public Dataset {
 public:
  explicit CIFAR10(const std::string& root = "", CIFAR10Options options = {});
  int64_t size() const override { return labels_.shape()[0]; }
  Example get(int64_t index) const override;
  std::optional<Example> get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& images() const { return images_; }  // u8 (N, 3, 32, 32)
  const Tensor& labels() const { return labels_; }  // i64 (N)
  static constexpr int64_t kRecordBytes = 1 + 3 * 32 * 32;

 private:
  Tensor images_, labels_;
};

}  // namespace hg::data
