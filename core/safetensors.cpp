// safetensors reading and writing (format in safetensors.h).
#include "core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/file.h"
#include "core/json.h"

namespace hg {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const DTypeInfo& info : kDTypeTable)
    if (info.safetensors_name == name) return info.dtype;
  return std::nullopt;
}

// ---- loading: validate everything, then allocate and read ------------------------------------

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const json::Value& v, const std::string& what) {
  const std::string where = what + ": tensor \"" + name + "\"";
  HG_CHECK(v.kind == json::Value::Kind::Object, where, ": expected an object");
  HG_CHECK(v.members.size() == 3, where, ": expected exactly the keys dtype, shape, data_offsets");
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  HG_CHECK(dtype && shape && offsets, where, ": expected exactly the keys dtype, shape, data_offsets");
  HG_CHECK(dtype->kind == json::Value::Kind::String, where, ": dtype must be a string");
  const std::optional<DType> dt = dtype_from_safetensors_name(dtype->text);
  HG_CHECK(dt.has_value(), where, ": unknown or unsupported dtype \"", dtype->text,
           "\" (halfgrad reads F32 F64 F16 BF16 I32 I64 U8)");
  Entry e{name, *dt, {}, 0, 0};
  HG_CHECK(shape->kind == json::Value::Kind::Array, where, ": shape must be an array");
  for (const json::Value& size : shape->items) {
    uint64_t s = 0;
    HG_CHECK(size.as_uint64(&s) && s <= uint64_t(INT64_MAX), where, ": shape entries must be non-negative integers");
    e.shape.push_back(int64_t(s));
  }
  HG_CHECK(offsets->kind == json::Value::Kind::Array && offsets->items.size() == 2 &&
               offsets->items[0].as_uint64(&e.begin) && offsets->items[1].as_uint64(&e.end),
           where, ": data_offsets must be two non-negative integers");
  HG_CHECK(e.begin <= e.end, where, ": data_offsets end ", e.end, " is before begin ", e.begin);
  const int64_t numel = checked_numel(e.shape, where);
  const int64_t nbytes = checked_nbytes(numel, element_size(e.dtype), where);
  HG_CHECK(e.end - e.begin == uint64_t(nbytes), where, ": data_offsets span ", e.end - e.begin, " bytes, but ",
           e.shape, " x ", e.dtype, " needs ", nbytes);
  return e;
}

}  // namespace

SafetensorsContents load_with_metadata(const std::string& path) {
  const std::string what = "load(\"" + path + "\")";
  const File file = File::open_regular(path, what);
  const uint64_t file_size = file.size();
  HG_CHECK(file_size >= 8, what, ": file has ", file_size, " bytes, too short for a safetensors header");
  unsigned char length_bytes[8];
  file.read_exact(length_bytes, 8, 0);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
  HG_CHECK(header_size <= kMaxSafetensorsHeader, what, ": header length ", header_size,
           " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  HG_CHECK(header_size <= file_size - 8, what, ": header length ", header_size, " is larger than the ",
           file_size - 8, " bytes that follow it (truncated or corrupt file)");
  std::string header(size_t(header_size), '\0');
  file.read_exact(header.data(), header_size, 8);
  const json::Value root = json::parse(header, what);
  HG_CHECK(root.kind == json::Value::Kind::Object, what, ": the header must be a JSON object");

  SafetensorsContents contents;
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.members) {
    if (name == "__metadata__") {
      HG_CHECK(value.kind == json::Value::Kind::Object, what, ": __metadata__ must be an object of strings");
      for (const auto& [key, text] : value.members) {
        HG_CHECK(text.kind == json::Value::Kind::String, what, ": __metadata__ value of \"", key,
                 "\" is not a string");
        contents.metadata[key] = text.text;
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, what));
  }
  // The data buffer must be tiled exactly: sorted by offset, starting at 0, no holes, no overlap,
  // and ending where the file ends.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    HG_CHECK(e.begin == expected, what, ": tensor \"", e.name, "\" starts at byte ", e.begin, " of the data, expected ",
             expected, e.begin < expected ? " (overlaps the previous tensor)" : " (leaves a hole)");
    expected = e.end;
  }
  const uint64_t data_size = file_size - 8 - header_size;
  HG_CHECK(expected == data_size, what, ": the tensors cover ", expected, " data bytes but the file holds ", data_size,
           expected < data_size ? " (trailing bytes after the last tensor)" : " (file truncated)");

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    file.read_exact(t.raw_data(), e.end - e.begin, 8 + header_size + e.begin);
    contents.tensors.emplace(e.name, std::move(t));
  }
  return contents;
}

std::map<std::string, Tensor> load(const std::string& path) { return load_with_metadata(path).tensors; }

// ---- saving -------------------------------------------------------------------------------------

void save(const std::string& path, const std::map<std::string, Tensor>& tensors, const Metadata& metadata) {
  const std::string what = "save(\"" + path + "\")";
  // Data order: widest dtype first (keeps every tensor aligned to its element size), then name.
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    HG_CHECK(t.defined(), what, ": tensor \"", name, "\" is undefined");
    HG_CHECK(name != "__metadata__", what, ": \"__metadata__\" is reserved and cannot name a tensor");
    HG_CHECK(json::is_valid_utf8(name), what, ": tensor name is not valid UTF-8");
    order.emplace_back(name, detail::to_cpu_contiguous(t, t.dtype()));
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return element_size(a.second.dtype()) > element_size(b.second.dtype());
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      HG_CHECK(json::is_valid_utf8(key) && json::is_valid_utf8(value), what, ": metadata is not valid UTF-8");
      if (!first) header += ',';
      header += json::quote(key);
      header += ':';
      header += json::quote(value);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const uint64_t nbytes = uint64_t(t.numel()) * element_size(t.dtype());
    std::string shape;
    for (int64_t s : t.shape()) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(s);
    }
    if (header.size() > 1) header += ",";
    header += json::quote(name) + ":{\"dtype\":\"" + std::string(dtype_info(t.dtype()).safetensors_name) +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned

  static std::atomic<uint64_t> counter{0};
  // NOTE: remove_stale_temporaries() below relies on this name.
  const std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  try {
    File out(temp, O_WRONLY | O_CREAT | O_TRUNC, what);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
    out.write_all(length, 8);
    out.write_all(header.data(), header.size());
    for (const auto& [name, t] : order) out.write_all(t.raw_data(), uint64_t(t.numel()) * element_size(t.dtype()));
    out.sync();
    out.close();
    HG_CHECK(::rename(temp.c_str(), path.c_str()) == 0, what, ": rename failed: ", std::strerror(errno));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code error;
  int removed = 0;
  // NOTE: error_code overloads throughout (a range-for would use the throwing increment): a
  // directory that vanishes or cannot be read simply has no temporaries to remove.
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // "<pid>.<n>" follows the prefix; a temporary whose process still runs is a save in progress.
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789.") != std::string::npos) continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    const bool running = pid > 0 && pid <= INT32_MAX && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH);
    std::error_code remove_error;
    if (!running && fs::remove(entry.path(), remove_error)) ++removed;
  }
  return removed;
}

}  // namespace hg
