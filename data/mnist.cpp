// Loading (Fashion-)MNIST from IDX files, with every check of docs/testing.md scenario 28.
#include "data/mnist.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "data/idx.h"
#include "ops/shape.h"

namespace hg::data {

namespace {

// "<root>/<stem>" or "<root>/<stem>.gz", whichever exists; a clear error when neither does.
std::string find_file(const std::string& dataset, const std::string& root, const std::string& stem,
                      const std::string& package) {
  for (const std::string& candidate : {root + "/" + stem, root + "/" + stem + ".gz"}) {
    // NOTE: the error_code overload (a missing file is not an error there): the throwing one
    // raises std::filesystem_error for a path that is too long or loops through symlinks.
    std::error_code error;
    if (std::filesystem::exists(candidate, error)) return candidate;
    HG_CHECK(!error, dataset, ": cannot access ", candidate, ": ", error.message());
  }
  std::string hint = package.empty() ? "" : "install the Debian package " + package + " (apt-get install " + package + "), ";
  HG_FAIL(dataset, ": cannot find ", root, "/", stem, "(.gz); ", hint,
          "or point HG_DATA (or the root argument) at a directory holding the four IDX files");
}

}  // namespace

MNIST::MNIST(const std::string& root, MNISTOptions options)
    : MNIST("MNIST", root, "/usr/share/datasets/mnist", "", options) {}

FashionMNIST::FashionMNIST(const std::string& root, MNISTOptions options)
    : MNIST("FashionMNIST", root, kFashionMnistRoot, "dataset-fashion-mnist", options) {}

MNIST::MNIST(const std::string& name, const std::string& root, const std::string& default_root,
             const std::string& package, MNISTOptions options) {
  const char* env = std::getenv("HG_DATA");
  root_ = !root.empty() ? root : (env && *env) ? std::string(env) : default_root;
  const std::string split = options.train ? "train" : "t10k";
  const std::string images_path = find_file(name, root_, split + "-images-idx3-ubyte", package);
  const std::string labels_path = find_file(name, root_, split + "-labels-idx1-ubyte", package);

  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);
  HG_CHECK(images.type_code == 0x08, name, ": ", images_path, " has IDX type 0x", std::hex, int(images.type_code),
           ", expected 0x08 (unsigned bytes)");
  HG_CHECK(labels.type_code == 0x08, name, ": ", labels_path, " has IDX type 0x", std::hex, int(labels.type_code),
           ", expected 0x08 (unsigned bytes)");
  HG_CHECK(images.dims.size() == 3, name, ": ", images_path, " has ", images.dims.size(),
           " dimensions, expected 3 (count, rows, columns)");
  HG_CHECK(labels.dims.size() == 1, name, ": ", labels_path, " has ", labels.dims.size(), " dimensions, expected 1");
  HG_CHECK(images.dims[1] == 28 && images.dims[2] == 28, name, ": ", images_path, " holds images of ", images.dims[1],
           "x", images.dims[2], " pixels, expected 28x28");
  HG_CHECK(images.dims[0] == labels.dims[0], name, ": ", images.dims[0], " images but ", labels.dims[0], " labels");
  for (size_t i = 0; i < labels.data.size(); ++i)
    HG_CHECK(labels.data[i] <= 9, name, ": label ", int(labels.data[i]), " at position ", i, " of ", labels_path,
             " is not a class in [0, 9]");

  images_ = empty({images.dims[0], images.dims[1], images.dims[2]}, {.dtype = u8});
  if (!images.data.empty()) std::memcpy(images_.raw_data(), images.data.data(), images.data.size());
  std::vector<int64_t> label_values(labels.data.begin(), labels.data.end());
  labels_ = from_vector(label_values, {labels.dims[0]});
}

Example MNIST::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "MNIST::get: index ", index, " outside [0, ", size(), ")");
  Example batch = *get_batch({index});
  return {batch.x.reshape({1, images_.shape()[1], images_.shape()[2]}), batch.y.reshape({})};
}

std::optional<Example> MNIST::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t count = int64_t(indices.size()), rows = images_.shape()[1], cols = images_.shape()[2];
  const int64_t pixels = rows * cols;
  Example out{empty({count, 1, rows, cols}), empty({count}, {.dtype = i64})};
  const Tensor images = images_.contiguous(), labels = labels_.contiguous();
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* x = out.x.data_ptr<float>();
  int64_t* y = out.y.data_ptr<int64_t>();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t sample = indices[size_t(k)];
    HG_CHECK(sample >= 0 && sample < size(), "MNIST::get_batch: index ", sample, " outside [0, ", size(), ")");
    const uint8_t* image = src + sample * pixels;
    for (int64_t p = 0; p < pixels; ++p) x[k * pixels + p] = float(image[p]) * (1.0f / 255.0f);
    y[k] = labels.data_ptr<int64_t>()[sample];
  }
  return out;
}

MNIST MNIST::head(int64_t n) const {
  HG_CHECK(n >= 0, "MNIST::head: n must be >= 0, got ", n);
  MNIST subset{Empty{}};
  subset.root_ = root_;
  const int64_t count = std::min(n, size());
  subset.images_ = narrow(images_, 0, 0, count);
  subset.labels_ = narrow(labels_, 0, 0, count);
  return subset;
}

}  // namespace hg::data
