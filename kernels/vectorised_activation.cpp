// kernels/vectorised_activation.h: chunks of a contiguous tensor, each through one of
// vector_math's loops.
#include "kernels/vectorised_activation.h"

#include <algorithm>
#include <array>

#include "core/copy.h"
#include "core/half.h"
#include "core/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace hg::kernels {

namespace {

constexpr int64_t kChunk = 2048;  // floats per chunk: three buffers stay in L1

// f32 values of t[first, first + n) in `buffer` (a pointer into t itself for f32).
template <class T>
const float* as_float(const T* t, int64_t first, int64_t n, float* buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return t + first;
  } else {
    convert_to_float(t + first, buffer, size_t(n));
    return buffer;
  }
}

template <class T>
void store(const float* values, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy(values, values + n, out);
  } else {
    convert_from_float(values, out, size_t(n));
  }
}

template <class Body>
void over_chunks(int64_t n, const Body& body) {
  parallel_for(0, (n + kChunk - 1) / kChunk, std::max<int64_t>(1, grain_for(64) / kChunk), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) body(c * kChunk, std::min(kChunk, n - c * kChunk));
  });
}

// y = f(x) through a vector_math array function (gelu_f32, sigmoid_f32, tanh_f32).
template <class T>
void forward(void (*f)(const float*, float*, int64_t), const T* x, T* y, int64_t n) {
  over_chunks(n, [&](int64_t first, int64_t m) {
    std::array<float, kChunk> in, out;
    f(as_float(x, first, m, in.data()), out.data(), m);
    store(out.data(), m, y + first);
  });
}

template <class T>
void backward(void (*f)(const float*, const float*, float*, int64_t), const T* x, const T* g, T* dx, int64_t n) {
  over_chunks(n, [&](int64_t first, int64_t m) {
    std::array<float, kChunk> xs, gs, out;
    f(as_float(x, first, m, xs.data()), as_float(g, first, m, gs.data()), out.data(), m);
    store(out.data(), m, dx + first);
  });
}

template <class F>
void visit_vectorised(DType dtype, const F& f) {
  switch (dtype) {
    case f32: return f.template operator()<float>();
    case f16: return f.template operator()<half>();
    case bf16: return f.template operator()<bfloat16>();
    default: HG_CHECK(false, "activation: no vectorised CPU kernel for ", dtype);
  }
}

Tensor map_cpu(void (*f)(const float*, float*, int64_t), const Tensor& x_in) {
  const Tensor x = detail::dense(x_in);
  Tensor y = empty(x.shape(), x.options());
  visit_vectorised(x.dtype(), [&]<class T> { forward<T>(f, x.data_ptr<T>(), y.data_ptr<T>(), x.numel()); });
  return y;
}

}  // namespace

bool activation_vectorised(const Tensor& x) {
  return x.device().is_cpu() && (x.dtype() == f32 || x.dtype() == f16 || x.dtype() == bf16);
}

Tensor gelu_forward_cpu(const Tensor& x) { return map_cpu(cpu::gelu_f32, x); }
Tensor log_forward_cpu(const Tensor& x) { return map_cpu(cpu::log_f32, x); }
Tensor softplus_forward_cpu(const Tensor& x) { return map_cpu(cpu::softplus_f32, x); }
Tensor sigmoid_forward_cpu(const Tensor& x) { return map_cpu(cpu::sigmoid_f32, x); }
Tensor tanh_forward_cpu(const Tensor& x) { return map_cpu(cpu::tanh_f32, x); }

namespace {

Tensor backward_cpu(void (*f)(const float*, const float*, float*, int64_t), const Tensor& x_in, const Tensor& grad_in) {
  const Tensor x = detail::dense(x_in);
  const Tensor g = grad_in.dtype() == x.dtype() ? detail::dense(grad_in) : detail::copy_with_options(grad_in, x.options());
  HG_CHECK(g.shape() == x.shape(), "activation backward: gradient of shape ", g.shape(), " for an input of shape ",
           x.shape());
  Tensor dx = empty(x.shape(), x.options());
  visit_vectorised(x.dtype(), [&]<class T> { backward<T>(f, x.data_ptr<T>(), g.data_ptr<T>(), dx.data_ptr<T>(), x.numel()); });
  return dx;
}

}  // namespace

Tensor gelu_backward_cpu(const Tensor& x, const Tensor& grad) { return backward_cpu(cpu::gelu_backward_f32, x, grad); }
Tensor silu_forward_cpu(const Tensor& x) { return map_cpu(cpu::silu_f32, x); }
Tensor silu_backward_cpu(const Tensor& x, const Tensor& grad) { return backward_cpu(cpu::silu_backward_f32, x, grad); }
Tensor softplus_backward_cpu(const Tensor& x, const Tensor& grad) {
  return backward_cpu(cpu::softplus_backward_f32, x, grad);
}

}  // namespace hg::kernels
