// The IDX format of (Fashion-)MNIST: a 4-byte big-endian magic 0x00 0x00 <type> <ndim>, ndim
// big-endian u32 sizes, then the row-major data. Files may be gzip-compressed (zlib reads both).
// Untrusted input: every size is checked against the bytes actually present before use, and
// the path must name a regular file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hg::data {

struct IdxArray {
  uint8_t type_code = 0;       // 0x08 = unsigned byte (the only type MNIST uses)
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;   // row-major, exactly prod(dims) * element size bytes
};

// Reads a plain or gzipped IDX file; hg::Error naming the file and the problem on bad input.
// Only as many bytes as the header describes are inflated (a gzip bomb stops there).
IdxArray read_idx(const std::string& path);
// Writes `array` as an IDX file, gzipped when `gzip` (test fixtures, fuzz seeds, small datasets).
void write_idx(const std::string& path, const IdxArray& array, bool gzip = false);

// The most data bytes (decompressed) an IDX header may describe: read_idx refuses larger claims.
inline constexpr int64_t kMaxIdxBytes = int64_t(1) << 31;

}  // namespace hg::data
