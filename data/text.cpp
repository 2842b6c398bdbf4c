// TextDataset (see text.h).
#include "data/text.h"

#include "core/file.h"

namespace hg::data {

namespace {

std::string read_all(const std::string& path) {
  const File file = File::open_regular(path, "TextDataset(\"" + path + "\")");
  std::string bytes(size_t(file.size()), '\0');
  if (!bytes.empty()) file.read_exact(bytes.data(), bytes.size(), 0);
  return bytes;
}

}  // namespace

TextDataset::TextDataset(const std::string& path, int64_t block_size)
    : TextDataset(read_all(path), block_size, "TextDataset(\"" + path + "\")") {}

TextDataset TextDataset::from_string(std::string text, int64_t block_size) {
  return TextDataset(std::move(text), block_size, "TextDataset::from_string");
}

TextDataset::TextDataset(std::string bytes, int64_t block_size, const std::string& what)
    : bytes_(std::move(bytes)), block_size_(block_size) {
  HG_CHECK(block_size_ >= 1, what, ": block_size must be at least 1, got ", block_size_);
  HG_CHECK(int64_t(bytes_.size()) >= block_size_ + 1, what, ": the text has ", bytes_.size(),
           " bytes, fewer than one block of ", block_size_, " tokens and its next-token target (", block_size_ + 1,
           " bytes)");
}

Example TextDataset::get(int64_t index) const {
  std::optional<Example> one = get_batch({index});
  return {one->x.reshape({block_size_}), one->y.reshape({block_size_})};
}

std::optional<Example> TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t n = int64_t(indices.size());
  Tensor x = empty({n, block_size_}, {.dtype = i64}), y = empty({n, block_size_}, {.dtype = i64});
  int64_t* xp = x.data_ptr<int64_t>();
  int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[size_t(k)];
    HG_CHECK(i >= 0 && i < size(), "TextDataset: index ", i, " outside [0, ", size(), ")");
    const auto* block = reinterpret_cast<const unsigned char*>(bytes_.data()) + i * block_size_;
    for (int64_t t = 0; t < block_size_; ++t) {
      xp[k * block_size_ + t] = block[t];
      yp[k * block_size_ + t] = block[t + 1];
    }
  }
  return Example{x, y};
}

std::string TextDataset::decode(const Tensor& tokens) {
  std::string text;
  for (int64_t t : tokens.to(i64).to_vector<int64_t>()) {
    HG_CHECK(t >= 0 && t < kVocabSize, "TextDataset::decode: token ", t, " is not a byte (expected [0, 256))");
    text.push_back(char(static_cast<unsigned char>(t)));
  }
  return text;
}

Tensor TextDataset::encode(const std::string& text) {
  std::vector<int64_t> tokens;
  tokens.reserve(text.size());
  for (unsigned char c : text) tokens.push_back(c);
  return from_vector(tokens, {int64_t(tokens.size())});
}

}  // namespace hg::data
