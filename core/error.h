// hg::Error and HG_CHECK: every misuse of halfgrad (bad shape, dtype, device, index or file)
// throws hg::Error with a message that names the operation and the offending values.
// Nothing in the library aborts or exits on user input.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace hg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
