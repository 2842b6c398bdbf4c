// map_elementwise<T>(out, {a, b, ...}, f): out[i] = f(a[i], b[i], ...) on the CPU, for inputs
// broadcast to out's shape with any strides. All operands hold T; f computes in Acc<T>.
//
// Work goes in chunks of 256 elements: 16-bit inputs are widened to float chunks with the SIMD
// converters, f runs over plain float arrays (so the compiler vectorises it), and the result is
// rounded back once. f32/f64 contiguous operands are used in place, without copies.
#pragma once
#include <array>
#include <utility>

#include "core/copy.h"
#include "core/cuda/cuda_copy.h"
#include "core/loops.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/math/elementwise.h"

namespace hg::kernels {

inline constexpr int64_t kChunk = 256;

template <class T>
const Acc<T>* load_chunk(const char* p, int64_t step, int64_t m, Acc<T>* buffer) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    if (step == int64_t(sizeof(T))) return reinterpret_cast<const T*>(p);
    for (int64_t i = 0; i < m; ++i) buffer[i] = *reinterpret_cast<const T*>(p + i * step);
  } else {
    if (step == int64_t(sizeof(T))) {
      convert_to_float(reinterpret_cast<const T*>(p), buffer, size_t(m));
    } else {
      for (int64_t i = 0; i < m; ++i) buffer[i] = float(*reinterpret_cast<const T*>(p + i * step));
    }
  }
  return buffer;
}

// Sum of n contiguous values of T in double. Eight interleaved partial sums instead of one:
// a single running sum makes every add wait for the previous one (4 cycles each), eight
// independent ones keep the adder busy and vectorise. The order is fixed, so the result does
// not depend on the thread count.
template <class T>
double sum_as_double(const T* values, int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  Acc<T> chunk[kChunk];
  for (int64_t j = 0; j < n; j += kChunk) {
    const int64_t m = std::min(kChunk, n - j);
    const Acc<T>* v = load_chunk<T>(reinterpret_cast<const char*>(values + j), sizeof(T), m, chunk);
    int64_t i = 0;
    for (; i + kLanes <= m; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += double(v[i + l]);
    for (; i < m; ++i) lanes[i % kLanes] += double(v[i]);
  }
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

template <class T>
void store_chunk(const Acc<T>* values, char* p, int64_t step, int64_t m) {
  if constexpr (!std::is_same_v<T, Acc<T>>) {
    if (step == int64_t(sizeof(T))) return convert_from_float(values, reinterpret_cast<T*>(p), size_t(m));
  }
  for (int64_t i = 0; i < m; ++i) *reinterpret_cast<T*>(p + i * step) = T(values[i]);
}

template <class T, size_t N, class F>
void map_run(const std::array<char*, N + 1>& p, int64_t n, const std::array<int64_t, N + 1>& step, const F& f) {
  using A = Acc<T>;
  alignas(64) A inputs[N][kChunk];
  alignas(64) A results[kChunk];
  for (int64_t j = 0; j < n; j += kChunk) {
    const int64_t m = std::min(kChunk, n - j);
    const A* src[N];
    for (size_t k = 0; k < N; ++k) src[k] = load_chunk<T>(p[k + 1] + j * step[k + 1], step[k + 1], m, inputs[k]);
    const bool in_place = std::is_same_v<T, A> && step[0] == int64_t(sizeof(T));
    A* dst = in_place ? reinterpret_cast<A*>(p[0] + j * step[0]) : results;
    [&]<size_t... K>(std::index_sequence<K...>) {
      for (int64_t i = 0; i < m; ++i) dst[i] = f(src[K][i]...);
    }(std::make_index_sequence<N>{});
    if (!in_place) store_chunk<T>(results, p[0] + j * step[0], step[0], m);
  }
}

// One 1-d run of map_elementwise behind a plain function pointer. The walk over the index space
// and the split over threads (walk_elementwise) do not depend on the element type or the functor,
// so they are compiled once per operand count instead of once per (type, functor) pair: those
// copies were half of an op file's object code and of its compile time.
template <size_t N>
using ElementwiseRun = void (*)(const std::array<char*, N + 1>& p, int64_t n, const std::array<int64_t, N + 1>& step,
                                const void* f);

template <size_t N>
void walk_elementwise(const Tensor& out, const std::array<Tensor, N>& inputs, int64_t element_size,
                      ElementwiseRun<N> run, const void* f) {
  std::array<char*, N + 1> base{static_cast<char*>(out.raw_data())};
  std::array<Shape, N + 1> strides{out.strides()};
  std::array<int64_t, N + 1> sizes;
  sizes.fill(element_size);
  for (size_t k = 0; k < N; ++k) {
    base[k + 1] = static_cast<char*>(inputs[k].raw_data());
    strides[k + 1] = detail::broadcast_strides(inputs[k], out.shape());
  }
  const detail::StridedWalk<N + 1> walk(out.shape(), base, strides, sizes);
  parallel_for(0, walk.numel(), detail::kElementwiseGrain, [&](int64_t begin, int64_t end) {
    walk.walk(begin, end, [&](const std::array<char*, N + 1>& p, int64_t n, const std::array<int64_t, N + 1>& s) {
      run(p, n, s, f);
    });
  });
}

template <class T, size_t N, class F>
void map_elementwise(const Tensor& out, const std::array<Tensor, N>& inputs, const F& f) {
  const ElementwiseRun<N> run = [](const std::array<char*, N + 1>& p, int64_t n, const std::array<int64_t, N + 1>& step,
                                   const void* fn) { map_run<T, N>(p, n, step, *static_cast<const F*>(fn)); };
  walk_elementwise<N>(out, inputs, int64_t(sizeof(T)), run, &f);
}

}  // namespace hg::kernels

// The GPU side. nvcc compiling (a CUDA build compiles every library source that calls map_into
// with nvcc): the launch template itself, instantiated right here for the functors this file
// uses. A CPU-only build gets a version that throws "built without CUDA".
#if defined(HG_WITH_CUDA) && defined(__CUDACC__)
#include "kernels/cuda/elementwise.cuh"
#endif

namespace hg::kernels {

namespace cuda {
#if defined(HG_WITH_CUDA) && !defined(__CUDACC__)
template <class F>
inline constexpr bool kCompiledByNvcc = false;
template <size_t N, class F>
void cuda_map_elementwise(const Tensor&, const std::array<Tensor, N>&, const F&) {
  static_assert(kCompiledByNvcc<F>, "this file launches an elementwise functor (map_into / map_to_new): in a "
                                    "CUDA build it must be compiled by nvcc -- re-run cmake, which finds such files");
}
#elif !defined(HG_WITH_CUDA)
template <size_t N, class F>
void cuda_map_elementwise(const Tensor& out, const std::array<Tensor, N>&, const F&) {
  detail::check_cuda_device(out.device(), "elementwise op");
}
#endif
}  // namespace cuda

// out = f(inputs...) into an existing tensor (inputs broadcast to its shape, all of its dtype),
// on its device. An input may be out itself (in-place ops): element i is read before it is written.
template <size_t N, class F>
void map_into(const Tensor& out, const std::array<Tensor, N>& inputs, const F& f) {
  if (out.numel() == 0) return;
  if (out.device().is_cuda()) cuda::cuda_map_elementwise<N>(out, inputs, f);
  else visit_dtype(out.dtype(), [&]<class T> {
    if constexpr (!is_floating_type_v<T> && !math::kIntegerSafe<F>)
      HG_FAIL("elementwise op: not defined for ", out.dtype(), " tensors");
    else
      map_elementwise<T, N>(out, inputs, f);
  });
}

// out = f(inputs...) into a new tensor of `shape` (inputs broadcast to it), on the inputs'
// device, in inputs[0]'s dtype: the entry point the op families use.
template <size_t N, class F>
Tensor map_to_new(const Shape& shape, const std::array<Tensor, N>& inputs, const F& f) {
  Tensor out = empty(shape, inputs[0].options());
  map_into<N>(out, inputs, f);
  return out;
}

}  // namespace hg::kernels
