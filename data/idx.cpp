// The IDX reader and writer (see idx.h).
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"

namespace hg::data {

namespace {

int64_t element_size_of(uint8_t type_code) {
  switch (type_code) {
    case 0x08: case 0x09: return 1;  // u8, i8
    case 0x0B: return 2;             // i16
    case 0x0C: case 0x0D: return 4;  // i32, f32
    case 0x0E: return 8;             // f64
    default: return 0;
  }
}

// A plain or gzipped file, read a piece at a time. gzip is inflated here with zlib's inflate, not
// its gzread: gzread ends quietly when a file stops right after the compressed data, before the
// 8-byte trailer that holds the CRC-32 and the length (zlib 1.2.13 with a file read in several
// pieces), so a file cut there loaded with nothing checked. Here the stream must reach its end,
// trailer checked, and nothing may follow it.
class Stream {
 public:
  Stream(const std::string& path, const std::string& what)
      : file_(File::open_regular(path, what)), size_(file_.size()), what_(what) {  // no FIFOs: a read must end
    uint8_t magic[2] = {0, 0};
    if (size_ >= 2) file_.read_exact(magic, 2, 0);
    gzip_ = magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) HG_CHECK(inflateInit2(&z_, 15 + 16) == Z_OK, what_, ": cannot start zlib");  // 16: the gzip wrapper
  }
  ~Stream() {
    if (gzip_) inflateEnd(&z_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Reads up to n bytes (fewer only at the end of the data).
  int64_t read(uint8_t* dst, int64_t n) {
    if (!gzip_) {
      const int64_t got = std::min<int64_t>(n, int64_t(size_ - offset_));
      if (got > 0) file_.read_exact(dst, uint64_t(got), offset_);
      offset_ += uint64_t(got);
      return got;
    }
    int64_t total = 0;
    while (total < n && !ended_) {
      if (z_.avail_in == 0) refill();
      const uInt piece = uInt(std::min<int64_t>(n - total, 1 << 20));
      z_.next_out = dst + total;
      z_.avail_out = piece;
      const int status = inflate(&z_, Z_NO_FLUSH);
      total += piece - z_.avail_out;
      if (status == Z_STREAM_END) ended_ = true;
      else if (status == Z_BUF_ERROR && z_.avail_in == 0 && offset_ == size_)
        HG_FAIL(what_, ": truncated gzip stream (the file ends before the compressed data and its checksum do)");
      else HG_CHECK(status == Z_OK || status == Z_BUF_ERROR, what_, ": corrupt gzip data: ",
                    z_.msg != nullptr ? z_.msg : "zlib error " + std::to_string(status));
    }
    return total;
  }
  // After the last read: a gzip stream must have ended (its trailer checked) with nothing after it.
  void finish() {
    if (!gzip_) return;
    uint8_t extra = 0;
    if (!ended_) read(&extra, 1);
    HG_CHECK(ended_, what_, ": truncated gzip stream (the file ends before its checksum)");
    HG_CHECK(z_.avail_in == 0 && offset_ == size_, what_, ": ", size_ - offset_ + z_.avail_in,
             " bytes follow the gzip stream (a damaged or concatenated file)");
  }

 private:
  void refill() {
    const uint64_t piece = std::min<uint64_t>(buffer_.size(), size_ - offset_);
    if (piece > 0) file_.read_exact(buffer_.data(), piece, offset_);
    offset_ += piece;
    z_.next_in = buffer_.data();
    z_.avail_in = uInt(piece);
  }

  File file_;
  uint64_t size_, offset_ = 0;
  std::string what_;
  bool gzip_ = false, ended_ = false;
  z_stream z_{};
  std::vector<uint8_t> buffer_ = std::vector<uint8_t>(1 << 16);
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Reads the magic and the dimensions; returns the number of data bytes they describe.
int64_t read_header(Stream& in, IdxArray& array, const std::string& what) {
  uint8_t magic[4];
  const int64_t got = in.read(magic, 4);
  HG_CHECK(got == 4, what, ": ", got, " bytes is too short for an IDX header");
  HG_CHECK(magic[0] == 0 && magic[1] == 0, what, ": bad magic number (the first two bytes must be 0, got ",
           int(magic[0]), " ", int(magic[1]), "): not an IDX file");
  array.type_code = magic[2];
  const int64_t element = element_size_of(array.type_code);
  HG_CHECK(element > 0, what, ": unknown IDX type code 0x", std::hex, int(array.type_code));
  const int64_t ndim = magic[3];
  uint8_t dims[4 * 255];
  const int64_t dim_bytes = in.read(dims, 4 * ndim);
  HG_CHECK(ndim >= 1 && dim_bytes == 4 * ndim, what, ": truncated header (", ndim, " dimensions need ", 4 + 4 * ndim,
           " bytes, file has ", 4 + dim_bytes, ")");
  int64_t expected = element;
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t size = big_endian_u32(dims + 4 * d);
    array.dims.push_back(size);
    HG_CHECK(!__builtin_mul_overflow(expected, size, &expected) && expected <= kMaxIdxBytes, what,
             ": dimensions overflow the ", kMaxIdxBytes, "-byte limit: not an MNIST-sized file");
  }
  return expected;
}

}  // namespace

// NOTE: the header says how many bytes must follow, so that is all we inflate (plus one byte to
// detect trailing data): a gzip bomb is stopped after at most the size its header claims, which
// is itself capped at kMaxIdxBytes. The buffer grows with the data actually read, so a header
// that lies about a huge size costs no memory up front.
IdxArray read_idx(const std::string& path) {
  const std::string what = "read_idx(\"" + path + "\")";
  Stream in(path, what);
  IdxArray array;
  const int64_t expected = read_header(in, array, what);
  int64_t have = 0;
  while (have < expected) {
    const int64_t piece = std::min<int64_t>(expected - have, std::max<int64_t>(have, 1 << 20));
    array.data.reserve(size_t(have + piece));  // exactly: a doubling vector could take twice the claim
    array.data.resize(size_t(have + piece));
    const int64_t got = in.read(array.data.data() + have, piece);
    have += got;
    if (got < piece) break;
  }
  HG_CHECK(have == expected, what, ": the header's dimensions need ", expected, " data bytes but the file has ", have,
           " (truncated file)");
  uint8_t extra = 0;
  HG_CHECK(in.read(&extra, 1) == 0, what, ": the header's dimensions need ", expected,
           " data bytes but more follow (trailing bytes; reading stopped there)");
  in.finish();
  return array;
}

void write_idx(const std::string& path, const IdxArray& array, bool gzip) {
  const std::string what = "write_idx(\"" + path + "\")";
  const int64_t element = element_size_of(array.type_code);
  HG_CHECK(element > 0, what, ": unknown IDX type code 0x", std::hex, int(array.type_code));
  HG_CHECK(!array.dims.empty() && array.dims.size() <= 255, what, ": an IDX file has 1 to 255 dimensions, got ",
           array.dims.size());
  int64_t bytes = element;
  for (int64_t d : array.dims)
    HG_CHECK(d >= 0 && d <= int64_t(UINT32_MAX) && !__builtin_mul_overflow(bytes, d, &bytes), what, ": dimension ", d,
             " does not fit the format");
  HG_CHECK(int64_t(array.data.size()) == bytes, what, ": the dimensions describe ", bytes, " bytes, data has ",
           array.data.size());
  std::vector<uint8_t> header{0, 0, array.type_code, uint8_t(array.dims.size())};
  for (int64_t d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(uint8_t(uint64_t(d) >> shift));
  gzFile file = gzopen(path.c_str(), gzip ? "wb" : "wbT");  // "T": zlib writes the bytes as they are
  HG_CHECK(file != nullptr, what, ": cannot open for writing");
  bool ok = gzwrite(file, header.data(), unsigned(header.size())) == int(header.size());
  for (size_t at = 0; ok && at < array.data.size(); at += 1 << 20) {
    const unsigned piece = unsigned(std::min<size_t>(array.data.size() - at, 1 << 20));
    ok = gzwrite(file, array.data.data() + at, piece) == int(piece);
  }
  ok = gzclose(file) == Z_OK && ok;
  HG_CHECK(ok, what, ": write failed");
}

}  // namespace hg::data
