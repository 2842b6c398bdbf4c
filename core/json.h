// A small strict JSON reader for safetensors headers (untrusted input): UTF-8 is validated,
// duplicate object keys are rejected, nesting and the number of values are bounded, numbers are
// kept as text and read as integers with overflow checks. Every step is O(n log n) at worst in
// the header's size. Not a general-purpose JSON library.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hg::json {

struct Member;

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // the string's contents, or the number as written
  std::vector<Value> items;     // arrays
  // NOTE: a struct of our own, not std::pair<std::string, Value>: pair's constructors are
  // constrained on traits of Value, which clang (rightly) refuses to evaluate while Value is
  // still incomplete here.
  std::vector<Member> members;  // objects, in file order

  // The number as a non-negative integer; nullopt-like failure reported through `ok`.
  bool as_uint64(uint64_t* out) const;
  const Value* find(std::string_view key) const;
};

struct Member {
  std::string key;
  Value value;
};

// The most values (objects, arrays, strings, numbers, literals) one document may hold. A real
// safetensors header needs about ten per tensor; the bound keeps a hostile 100 MB header of
// `[0,0,0,...` from growing into gigabytes of Values (each is ~100 bytes).
inline constexpr size_t kMaxValues = size_t(1) << 22;

// Parses `text` as one JSON value (surrounding whitespace allowed). Throws hg::Error whose
// message starts with `what` and says where and why parsing failed.
Value parse(std::string_view text, std::string_view what);

// Writes `s` as a JSON string literal, with escapes.
std::string quote(std::string_view s);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace hg::json
