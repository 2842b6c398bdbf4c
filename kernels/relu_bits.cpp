// kernels/relu_bits.h: integer compares on the 16-bit patterns, 8 at a time, chunks in parallel.
#include "kernels/relu_bits.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/copy.h"
#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"

namespace hg::kernels {

namespace {

constexpr int64_t kChunk = 4096;  // values per task of parallel_chunks

// +inf's bits: every NaN's lie above them.
template <class T>
constexpr int16_t kInfinityBits = std::is_same_v<T, bfloat16> ? 0x7f80 : 0x7c00;

// max's bits in T: +inf's, or those of a positive value T holds exactly.
template <class T>
int16_t bits_of(double max) {
  const T t(static_cast<float>(max));
  HG_CHECK(max > 0 && (std::isinf(max) || double(float(t)) == max),
           "internal error: relu's bound must be +inf or a positive value the dtype holds, got ", max);
  return int16_t(t.bits);
}

// 8 values at a time as a GCC vector of int16 (one SSE or NEON register: wider ones, in a build
// for any x86-64, GCC moved lane by lane; written as a plain loop, it stayed scalar, and the &&
// of its tests branched on every value), the tail value by value with the same tests.
constexpr int kLanes = 8;
using Bits = int16_t __attribute__((vector_size(kLanes * sizeof(int16_t))));

template <class T>
[[gnu::always_inline]] inline void load(const T* p, Bits& v) {
  std::memcpy(&v, static_cast<const void*>(p), sizeof v);
}
template <class T>
[[gnu::always_inline]] inline void store(const Bits& v, T* p) {
  std::memcpy(static_cast<void*>(p), &v, sizeof v);
}

// g where 0 < s < below, else +0.
[[gnu::always_inline]] inline void pass_bits(const Bits& s, const Bits& g, int16_t below, Bits& out) {
  const Bits zero = {};
  out = ((s > zero) & (s < below)) ? g : zero;
}
int16_t pass_bits(int16_t s, int16_t g, int16_t below) { return s > 0 && s < below ? g : 0; }

template <class T>
int16_t bits(const T& v) {
  return int16_t(v.bits);
}

// `below`: the first bits that pass no gradient (max's, or +inf's + 1 for relu).
template <class T>
void backward(const T* x, const T* g, T* dx, int64_t n, int16_t below) {
  parallel_chunks(n, kChunk, [&](int64_t, int64_t first, int64_t end) {
    int64_t i = first;
    for (; i + kLanes <= end; i += kLanes) {
      Bits s, gradient, out;
      load(x + i, s);
      load(g + i, gradient);
      pass_bits(s, gradient, below, out);
      store(out, dx + i);
    }
    for (; i < end; ++i) dx[i].bits = uint16_t(pass_bits(bits(x[i]), bits(g[i]), below));
  });
}

template <class F>
void visit_16bit(DType dtype, const F& f) {
  switch (dtype) {
    case f16: return f.template operator()<half>();
    case bf16: return f.template operator()<bfloat16>();
    default: HG_CHECK(false, "internal error: relu's bit kernels take f16 and bf16, got ", dtype);
  }
}

}  // namespace

bool relu_bits_apply(const Tensor& x) { return x.device().is_cpu() && (x.dtype() == f16 || x.dtype() == bf16); }

Tensor relu_backward_bits(const Tensor& x_in, const Tensor& grad, double max) {
  const Tensor x = detail::dense(x_in);
  const Tensor g = grad.dtype() == x.dtype() ? detail::dense(grad) : detail::copy_with_options(grad, x.options());
  HG_CHECK(g.shape() == x.shape(), "relu backward: gradient of shape ", g.shape(), " for an input of shape ", x.shape());
  Tensor dx = empty(x.shape(), x.options());
  visit_16bit(x.dtype(), [&]<class T> {
    const int16_t below = std::isinf(max) ? int16_t(kInfinityBits<T> + 1) : bits_of<T>(max);
    backward<T>(x.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), x.numel(), below);
  });
  return dx;
}

}  // namespace hg::kernels
