// libFuzzer target: the IDX reader (data/idx.h), plain and gzipped. The first byte picks how the
// rest is stored: even = as it is (zlib still inflates it if it starts like gzip), odd = gzip-
// compressed here, so the fuzzer explores IDX headers behind a valid gzip stream too. Any input
// must read or throw hg::Error; what reads must write back and read again identically.
#include <zlib.h>

#include <cstdlib>
#include <vector>

#include "fuzz_support.h"

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&z, uLong(size)));
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = uInt(size);
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static hg_fuzz::MemoryFile input, rewritten;
  const bool compress = data[0] & 1;
  const std::vector<uint8_t> bytes = compress ? gzip(data + 1, size - 1) : std::vector<uint8_t>(data + 1, data + size);
  hg::data::IdxArray array;
  try {
    array = hg::data::read_idx(input.write(bytes.data(), bytes.size()));
  } catch (const hg::Error&) {
    return 0;
  }
  const std::string& path = rewritten.write(nullptr, 0);
  hg::data::write_idx(path, array, compress);
  const hg::data::IdxArray again = hg::data::read_idx(path);
  if (again.type_code != array.type_code || again.dims != array.dims || again.data != array.data) std::abort();
  return 0;
}
