// The IDX reader (see idx.h).
#include "data/idx.h"

#include <zlib.h>

#include <filesystem>

#include "core/error.h"

namespace hg::data {

namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  HG_CHECK(std::filesystem::exists(path), "read_idx(\"", path, "\"): file not found");
  gzFile file = gzopen(path.c_str(), "rb");
  HG_CHECK(file != nullptr, "read_idx(\"", path, "\"): cannot open");
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  while (true) {
    const int got = gzread(file, buffer, sizeof buffer);
    if (got < 0) {
      int code = 0;
      const std::string why = gzerror(file, &code);
      gzclose(file);
      HG_FAIL("read_idx(\"", path, "\"): corrupt data: ", why);
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + got);
    if (int64_t(bytes.size()) > kMaxIdxBytes) {
      gzclose(file);
      HG_FAIL("read_idx(\"", path, "\"): more than ", kMaxIdxBytes, " bytes: not an MNIST-sized file");
    }
  }
  // NOTE: zlib reports a stream cut off before its checksum only here, not through gzread.
  HG_CHECK(gzclose(file) == Z_OK, "read_idx(\"", path, "\"): truncated or corrupt gzip stream (unexpected end of file)");
  return bytes;
}

int64_t element_size_of(uint8_t type_code) {
  switch (type_code) {
    case 0x08: case 0x09: return 1;  // u8, i8
    case 0x0B: return 2;             // i16
    case 0x0C: case 0x0D: return 4;  // i32, f32
    case 0x0E: return 8;             // f64
    default: return 0;
  }
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  const std::string what = "read_idx(\"" + path + "\")";
  std::vector<uint8_t> bytes = read_all(path);
  HG_CHECK(bytes.size() >= 4, what, ": ", bytes.size(), " bytes is too short for an IDX header");
  HG_CHECK(bytes[0] == 0 && bytes[1] == 0, what, ": bad magic number (the first two bytes must be 0, got ",
           int(bytes[0]), " ", int(bytes[1]), "): not an IDX file");
  IdxArray array;
  array.type_code = bytes[2];
  const int64_t element = element_size_of(array.type_code);
  HG_CHECK(element > 0, what, ": unknown IDX type code 0x", std::hex, int(array.type_code));
  const size_t ndim = bytes[3];
  const size_t header = 4 + 4 * ndim;
  HG_CHECK(ndim >= 1 && bytes.size() >= header, what, ": truncated header (", ndim, " dimensions need ", header,
           " bytes, file has ", bytes.size(), ")");
  int64_t expected = element;
  for (size_t d = 0; d < ndim; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    const int64_t size = (int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | int64_t(p[3]);
    array.dims.push_back(size);
    HG_CHECK(!__builtin_mul_overflow(expected, size, &expected) && expected <= kMaxIdxBytes, what,
             ": dimensions overflow");
  }
  HG_CHECK(int64_t(bytes.size() - header) == expected, what, ": the header's dimensions need ", expected,
           " data bytes but the file has ", bytes.size() - header,
           int64_t(bytes.size() - header) < expected ? " (truncated file)" : " (trailing bytes)");
  array.data.assign(bytes.begin() + int64_t(header), bytes.end());
  return array;
}

}  // namespace hg::data
