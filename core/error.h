// hg::Error and HG_CHECK: every misuse of halfgrad (bad shape, dtype, device, index or file)
// throws hg::Error with a message that names the operation and the offending values.
// Nothing in the library aborts or exits on user input.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hg {

namespace detail {
// Writes byte c as \xNN.
inline void append_hex_escape(std::string& out, unsigned char c) {
  const char* digits = "0123456789abcdef";
  out += "\\x";
  out += digits[c >> 4];
  out += digits[c & 15];
}
// A message made safe to print: control bytes other than newline and tab (ESC, NUL, DEL, ...)
// become \xNN, so text that came from a file can neither end the message early (a NUL stops C
// strings) nor drive the terminal (escape sequences).
inline std::string printable(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) append_hex_escape(out, c);
    else out += ch;
  }
  return out;
}
}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(detail::printable(message)) {}
};

// Untrusted text (a key, a name or a value read from a file) for an error message: in quotes,
// with quotes, backslashes and every control byte escaped, newlines included (hg-train prints an
// error as one line), and cut after 120 bytes.
inline std::string quoted(std::string_view text) {
  constexpr size_t kMax = 120;
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20 || c == 0x7f) detail::append_hex_escape(out, c);
    else out += char(c);
  }
  if (text.size() > kMax) out += "...";
  return out + "\"";
}

namespace detail {
// Concatenates anything printable: str("conv2d: got ", shape, " and ", dtype).
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

}  // namespace hg

// HG_CHECK(cond, "op: message ", value, ...) throws hg::Error when cond is false.
#define HG_CHECK(cond, ...)                                     \
  do {                                                          \
    if (!(cond)) throw ::hg::Error(::hg::detail::str(__VA_ARGS__)); \
  } while (0)

// HG_FAIL("op: message ", ...) throws unconditionally.
#define HG_FAIL(...) throw ::hg::Error(::hg::detail::str(__VA_ARGS__))
