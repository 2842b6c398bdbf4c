// A small strict JSON reader for safetensors headers (untrusted input): UTF-8 is validated,
// duplicate object keys are rejected, nesting is bounded, numbers are kept as text and read as
// integers with overflow checks. Not a general-purpose JSON library.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hg::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // the string's contents, or the number as written
  std::vector<Value> items;                             // arrays
  std::vector<std::pair<std::string, Value>> members;   // objects, in file order

  // The number as a non-negative integer; nullopt-like failure reported through `ok`.
  bool as_uint64(uint64_t* out) const;
  const Value* find(std::string_view key) const;
};

// Parses `text` as one JSON value (surrounding whitespace allowed). Throws hg::Error whose
// message starts with `what` and says where and why parsing failed.
Value parse(std::string_view text, std::string_view what);

// Writes `s` as a JSON string literal, with escapes.
std::string quote(std::string_view s);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace hg::json
