// The default generator and the random factories.
#include "core/rng.h"

#include <mutex>

#include "core/convert.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/loops.h"

namespace hg {

namespace {
std::mutex g_generator_mutex;
random::GeneratorState g_generator{.seed = 67280421310721ull, .offset = 0};

// Fills a new CPU tensor with value(i) for element i, then moves it to the requested device.
template <class ValueOf>
Tensor generate(std::string_view op, const Shape& shape, TensorOptions options, const ValueOf& value_of) {
  checked_numel(shape, op);
  Tensor out = empty(shape, {.dtype = options.dtype});
  visit_dtype(options.dtype, [&]<class T> {
    T* data = out.data_ptr<T>();
    parallel_for(0, out.numel(), detail::kElementwiseGrain / 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) data[i] = value_of.template operator()<T>(uint64_t(i));
    });
  });
  if (!options.device.is_cpu()) return detail::copy_with_options(out, options);  // generated on the host
  if (options.requires_grad) detail::make_leaf_require_grad(out);
  return out;
}

// Bits of randomness a uniform value of type T can hold exactly below 1.0.
template <class T> constexpr int uniform_bits() {
  if constexpr (std::is_same_v<T, double>) return 32;
  else if constexpr (std::is_same_v<T, half>) return 11;
  else if constexpr (std::is_same_v<T, bfloat16>) return 8;
  else return 24;
}
}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  g_generator = {.seed = seed, .offset = 0};
}

namespace random {
GeneratorState get_state() {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  return g_generator;
}
void set_state(GeneratorState state) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  g_generator = state;
}
GeneratorState reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  const GeneratorState start = g_generator;
  g_generator.offset += count;
  return start;
}
}  // namespace random

Tensor rand(Shape shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype), "rand: expected a floating dtype, got ", options.dtype);
  const auto g = random::reserve(uint64_t(checked_numel(shape, "rand")));
  return generate("rand", shape, options, [&]<class T>(uint64_t i) {
    return detail::convert_value<T>(philox::uniform(g.seed, g.offset, i, uniform_bits<T>()));
  });
}

Tensor randn(Shape shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype), "randn: expected a floating dtype, got ", options.dtype);
  const auto g = random::reserve(uint64_t(checked_numel(shape, "randn")));
  return generate("randn", shape, options, [&]<class T>(uint64_t i) {
    return detail::convert_value<T>(float(philox::normal(g.seed, g.offset, i)));
  });
}

Tensor randint(int64_t low, int64_t high, Shape shape, TensorOptions options) {
  HG_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  HG_CHECK(!options.requires_grad, "randint: integer tensors cannot require grad");
  const auto g = random::reserve(uint64_t(checked_numel(shape, "randint")));
  return generate("randint", shape, options, [&]<class T>(uint64_t i) {
    return detail::convert_value<T>(philox::integer(g.seed, g.offset, i, low, high));
  });
}

}  // namespace hg
