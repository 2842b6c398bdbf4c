// Context and the checks of custom Functions' outputs and gradients (ops/function.h).
#include "ops/function.h"

#include <cstdlib>
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

namespace hg::autograd {

void Context::save_for_backward(const std::vector<Tensor>& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

std::vector<Tensor> Context::saved() const {
  std::vector<Tensor> out;
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

std::vector<std::string> Context::saved_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : data_) keys.push_back(key);
  return keys;
}

namespace detail {

void saved_value_missing(const std::string& op, std::string_view key, const std::vector<std::string>& keys) {
  std::string saved;
  for (const std::string& k : keys) saved += (saved.empty() ? "\"" : ", \"") + k + "\"";
  HG_FAIL(op, ": ctx.get(\"", key, "\"): no value was saved under that key (saved: ",
          saved.empty() ? std::string("none") : saved, "); save it in forward with ctx.save(\"", key, "\", value)");
}

namespace {
// A readable type name: GCC and Clang mangle type_info names ("d" for double), so demangle them.
std::string type_name(const std::type_info& type) {
#if __has_include(<cxxabi.h>)
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  if (status == 0 && name) return name.get();
#endif
  return type.name();
}
}  // namespace

void saved_value_wrong_type(const std::string& op, std::string_view key, const std::type_info& saved,
                            const std::type_info& asked) {
  // NOTE: get<T> names exactly the type that was saved, without conversions (an int is not read
  // as a double): a std::any holds one type.
  HG_FAIL(op, ": ctx.get(\"", key, "\"): the value saved under that key is of type ", type_name(saved), ", not ",
          type_name(asked), "; get<T> must name the type it was saved with");
}

void check_function_outputs(const std::string& name, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  HG_CHECK(!outputs.empty(), name, ": forward returned no outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    HG_CHECK(outputs[i].defined(), name, ": forward returned an undefined tensor as output ", i);
    // A forward that returns one of its inputs must not turn that input into a non-leaf, and one
    // tensor cannot hold two slots of the node: such outputs are attached as fresh aliases.
    bool alias = false;
    for (const Tensor& t : inputs) alias = alias || outputs[i].is_same(t);
    for (size_t j = 0; j < i; ++j) alias = alias || outputs[i].is_same(outputs[j]);
    if (alias) outputs[i] = outputs[i].detach();
  }
}

void check_function_grads(const std::string& name, const std::vector<Tensor>& grads, const std::vector<Shape>& shapes) {
  HG_CHECK(grads.size() == shapes.size(), name, ": backward returned ", grads.size(), " gradients, but forward took ",
           shapes.size(), " tensor arguments (return an undefined Tensor() for inputs without a gradient)");
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined())
      HG_CHECK(grads[i].shape() == shapes[i], name, ": backward returned a gradient of shape ", grads[i].shape(),
               " for input ", i, " of shape ", shapes[i]);
}

}  // namespace detail

}  // namespace hg::autograd
