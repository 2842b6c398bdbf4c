// CIFAR-10's binary files (see cifar.h), every record checked.
#include "data/cifar.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/file.h"

namespace hg::data {

namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr uint64_t kMaxFileBytes = uint64_t(60000) * CIFAR10::kRecordBytes;  // the whole dataset

// root/name, or root/cifar-10-batches-bin/name; a clear error naming both when neither exists.
std::string find_file(const std::string& root, const std::string& name) {
  for (const std::string& candidate : {root + "/" + name, root + "/cifar-10-batches-bin/" + name}) {
    std::error_code error;
    if (std::filesystem::exists(candidate, error)) return candidate;
    HG_CHECK(!error, "CIFAR10: cannot access ", candidate, ": ", error.message());
  }
  HG_FAIL("CIFAR10: cannot find ", name, " in ", root, " or ", root, "/cifar-10-batches-bin (the binary version of "
          "CIFAR-10, cifar-10-binary.tar.gz)");
}

}  // namespace

CIFAR10::CIFAR10(const std::string& root_arg, CIFAR10Options options) {
  const char* env = std::getenv("HG_DATA");
  const std::string root = !root_arg.empty() ? root_arg : (env && *env) ? std::string(env) : "";
  HG_CHECK(!root.empty(), "CIFAR10: no root directory (pass one, or set HG_DATA)");
  std::vector<std::string> names;
  if (options.train)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::vector<uint8_t> bytes;
  for (const std::string& name : names) {
    const std::string path = find_file(root, name);
    const std::string what = "CIFAR10(\"" + path + "\")";
    const File file = File::open_regular(path, what);
    const uint64_t size = file.size();
    HG_CHECK(size > 0 && size % kRecordBytes == 0 && size <= kMaxFileBytes, what, ": ", size, " bytes is not a whole "
             "number of ", kRecordBytes, "-byte records (a label byte and 3072 pixel bytes each)",
             size > kMaxFileBytes ? ", and more than the whole dataset" : "");
    const size_t at = bytes.size();
    bytes.resize(at + size);
    file.read_exact(bytes.data() + at, size, 0);
  }
  const int64_t count = int64_t(bytes.size() / kRecordBytes);
  images_ = empty({count, 3, 32, 32}, {.dtype = u8});
  std::vector<int64_t> labels(static_cast<size_t>(count));
  uint8_t* pixels = images_.data_ptr<uint8_t>();
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* record = bytes.data() + i * kRecordBytes;
    HG_CHECK(record[0] <= 9, "CIFAR10: record ", i, " has label ", int(record[0]), ", not a class in [0, 9] (a damaged "
             "file, or not CIFAR-10's binary format)");
    labels[size_t(i)] = record[0];
    std::memcpy(pixels + i * kPixels, record + 1, kPixels);
  }
  labels_ = from_vector(labels, {count});
}

Example CIFAR10::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "CIFAR10::get: index ", index, " outside [0, ", size(), ")");
  Example batch = *get_batch({index});
  return {batch.x.reshape({3, 32, 32}), batch.y.reshape({})};
}

std::optional<Example> CIFAR10::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t count = int64_t(indices.size());
  Example out{empty({count, 3, 32, 32}), empty({count}, {.dtype = i64})};
  const uint8_t* src = images_.data_ptr<uint8_t>();
  float* x = out.x.data_ptr<float>();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t sample = indices[size_t(k)];
    HG_CHECK(sample >= 0 && sample < size(), "CIFAR10::get_batch: index ", sample, " outside [0, ", size(), ")");
    for (int64_t p = 0; p < kPixels; ++p) x[k * kPixels + p] = float(src[sample * kPixels + p]) * (1.0f / 255.0f);
    out.y.data_ptr<int64_t>()[k] = labels_.data_ptr<int64_t>()[sample];
  }
  return out;
}

}  // namespace hg::data
