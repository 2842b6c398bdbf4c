// hg::data::TextDataset: a text file as byte-level tokens for a character-level language model.
// Token t is byte t of the file (vocabulary 256: UTF-8 text is modelled byte by byte). The file is
// cut into contiguous, non-overlapping blocks of `block_size` tokens; example i is
//
//   x = bytes[i * block_size,     (i + 1) * block_size)        i64 [block_size]
//   y = bytes[i * block_size + 1, (i + 1) * block_size + 1)    the next token at each position
//
// so size() = (bytes - 1) / block_size, and a DataLoader with shuffle visits the blocks in a new
// order each epoch. Reading is one pass over the file into memory.
//
//   hg::data::TextDataset text("/usr/share/common-licenses/GPL-3", 64);
//   hg::data::DataLoader loader(text, {.batch_size = 32});      // x, y: i64 [32, 64]
//   std::string s = hg::data::TextDataset::decode(x[0]);         // the bytes back as text
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

class TextDataset : public Dataset {
 public:
  TextDataset(const std::string& path, int64_t block_size);
  // The same from text already in memory.
  static TextDataset from_string(std::string text, int64_t block_size);

  int64_t size() const override { return (int64_t(bytes_.size()) - 1) / block_size_; }
  Example get(int64_t index) const override;
  std::optional<Example> get_batch(const std::vector<int64_t>& indices) const override;

  static constexpr int64_t kVocabSize = 256;
  int64_t block_size() const { return block_size_; }
  const std::string& text() const { return bytes_; }
  // Tokens (any integer tensor of values in [0, 256)) back to the bytes they stand for.
  static std::string decode(const Tensor& tokens);
  // Text to tokens: i64 [text.size()].
  static Tensor encode(const std::string& text);

 private:
  TextDataset(std::string bytes, int64_t block_size, const std::string& what);
  std::string bytes_;
  int64_t block_size_;
};

}  // namespace hg::data
