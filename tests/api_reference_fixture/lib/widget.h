// Declarations of each kind the check must find, and of each kind it must not.
#pragma once
#include <string>

namespace hg {

struct Forward;  // a forward declaration: not a name of its own

struct Widget {
  int size = 0;
  void member();  // members are documented with their class
};

Tensor make_widget(int n, const std::string& label = "{ not a brace }");
template <class F>
decltype(auto) visit_widget(const Widget& w, F&& f);
using WidgetList = std::vector<Widget>;
inline constexpr int kLimit = 3;
Tensor load(const std::string& path);

namespace detail {
void hidden();  // a detail namespace is not public
}  // namespace detail

namespace {
void also_hidden();
}  // namespace

}  // namespace hg

namespace hg::nn {

class Gadget {
 public:
  void use();
};

Tensor load(const std::string& path);  // missing from the fixture's api.md

}  // namespace hg::nn
