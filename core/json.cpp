// The strict JSON reader behind the safetensors loader (see json.h).
#include "core/json.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace hg::json {

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  Value parse_document() {
    skip_space();
    Value v = parse_value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view why) const {
    HG_FAIL(what_, ": invalid JSON header at byte ", pos_, ": ", why);
  }

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void expect_word(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64 levels");
    if (++values_ > kMaxValues) fail("more than " + std::to_string(kMaxValues) + " values");
    Value v;
    switch (peek()) {
      case '{': v.kind = Value::Kind::Object; parse_object(v, depth); break;
      case '[': v.kind = Value::Kind::Array; parse_array(v, depth); break;
      case '"': v.kind = Value::Kind::String; v.text = parse_string(); break;
      case 't': expect_word("true"); v.kind = Value::Kind::Bool; v.boolean = true; break;
      case 'f': expect_word("false"); v.kind = Value::Kind::Bool; break;
      case 'n': expect_word("null"); break;
      default: v.kind = Value::Kind::Number; v.text = parse_number(); break;
    }
    return v;
  }

  void parse_object(Value& v, int depth) {
    expect('{');
    skip_space();
    if (peek() == '}') return void(++pos_);
    while (true) {
      skip_space();
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      v.members.push_back({std::move(key), parse_value(depth + 1)});
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return reject_duplicate_keys(v.members);
    }
  }

  // NOTE: sorting once, not comparing each key with every earlier one: a header of 100k
  // tensors took 30 s the quadratic way (and a 100 MB one would take hours).
  void reject_duplicate_keys(const std::vector<Member>& members) const {
    std::vector<std::string_view> keys;
    keys.reserve(members.size());
    for (const Member& m : members) keys.push_back(m.key);
    std::sort(keys.begin(), keys.end());
    const auto duplicate = std::adjacent_find(keys.begin(), keys.end());
    if (duplicate != keys.end()) fail("duplicate key \"" + std::string(*duplicate) + "\" in the object ending here");
  }

  void parse_array(Value& v, int depth) {
    expect('[');
    skip_space();
    if (peek() == ']') return void(++pos_);
    while (true) {
      skip_space();
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      expect(']');
      return;
    }
  }

  std::string parse_number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') ++pos_;
    else if (peek() >= '1' && peek() <= '9') while (peek() >= '0' && peek() <= '9') ++pos_;
    else fail("invalid value");
    if (peek() == '.') {
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("digit expected after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("digit expected in exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  unsigned parse_hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      code <<= 4;
      if (c >= '0' && c <= '9') code |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') code |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') code |= unsigned(c - 'A' + 10);
      else fail("invalid \\u escape");
      ++pos_;
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair encodes one code point
            if (peek() != '\\') fail("unpaired surrogate");
            ++pos_;
            expect('u');
            const unsigned low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  std::string_view s_;
  std::string_view what_;
  size_t pos_ = 0;
  size_t values_ = 0;  // parsed so far, against kMaxValues
};

}  // namespace

bool Value::as_uint64(uint64_t* out) const {
  if (kind != Kind::Number || text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;  // negative, fractional or exponent forms are not sizes
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v)) return false;
  }
  *out = v;
  return true;
}

const Value* Value::find(std::string_view key) const {
  for (const Member& m : members)
    if (m.key == key) return &m.value;
  return nullptr;
}

Value parse(std::string_view text, std::string_view what) {
  HG_CHECK(is_valid_utf8(text), what, ": the JSON header is not valid UTF-8");
  return Parser(text, what).parse_document();
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", unsigned(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra;
    unsigned cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { extra = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { extra = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { extra = 3; cp = c & 0x07; }
    else return false;
    if (i + size_t(extra) >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr unsigned kMinForLength[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += size_t(extra) + 1;
  }
  return true;
}

}  // namespace hg::json
