// libFuzzer target: the strict JSON reader behind safetensors headers (core/json.h). Any input
// must parse or throw hg::Error; a parsed document must hold only valid UTF-8 and keep every
// object's keys unique. Anything else escaping, or a sanitizer report, is a finding.
#include <cstdlib>
#include <set>
#include <string_view>

#include "core/json.h"
#include "core/error.h"

namespace {

void check(const hg::json::Value& v) {
  if (!hg::json::is_valid_utf8(v.text)) std::abort();
  uint64_t number = 0;
  if (v.kind == hg::json::Value::Kind::Number) (void)v.as_uint64(&number);
  for (const hg::json::Value& item : v.items) check(item);
  std::set<std::string_view> keys;
  for (const hg::json::Member& m : v.members) {
    if (!hg::json::is_valid_utf8(m.key) || !keys.insert(m.key).second) std::abort();
    if (v.find(m.key) == nullptr) std::abort();
    check(m.value);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check(hg::json::parse(text, "fuzz"));
  } catch (const hg::Error&) {
  }
  // quote() of any bytes must give a literal that parses back to them when they are UTF-8.
  if (hg::json::is_valid_utf8(text) && hg::json::parse(hg::json::quote(text), "fuzz").text != text) std::abort();
  return 0;
}
