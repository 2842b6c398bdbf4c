// The CUDA side of kernels::map_into (kernels/cpu/elementwise_loop.h): out[i] = f(a[i], b[i], ...)
// for T in {f32, f64, f16, bf16, i32, i64, u8}, loading T, computing in float (16-bit) or T,
// storing T. Contiguous operands take a plain grid-stride loop (16-byte accesses when aligned);
// broadcast or strided ones go through the indexer.
//
// A header, included by elementwise_loop.h when nvcc compiles: the launch is instantiated in the
// file that uses the functor, so no list of functors exists anywhere. In a CUDA build, CMake
// compiles every library source that calls map_into / map_to_new with nvcc (CMakeLists.txt).
#pragma once
#include <array>
#include <utility>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/elementwise.h"

namespace hg::kernels::cuda {

// (Not in an anonymous namespace: every file that launches a functor instantiates these, and the
// linker keeps one copy of each, as with any template.)

template <class T, size_t N>
struct Pointers {
  T* out;
  const T* in[N > 0 ? N : 1];
};

template <class T, size_t N, class F, size_t... K>
__device__ __forceinline__ void apply_at(const Pointers<T, N>& p, const int64_t (&off)[N + 1], const F& f,
                                         std::index_sequence<K...>) {
  p.out[off[0]] = cuda_detail::from_acc<T>(f(cuda_detail::to_acc(p.in[K][off[K + 1]])...));
}

template <class T, size_t N, class F>
__global__ void map_contiguous(Pointers<T, N> p, int64_t numel, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[N + 1];
    for (size_t k = 0; k <= N; ++k) off[k] = i;
    apply_at<T, N>(p, off, f, std::make_index_sequence<N>{});
  }
}

// The same with 16-byte loads and stores (8 halves, 4 floats, 2 doubles per access) when every
// operand is 16-byte aligned: one wide memory transaction instead of several narrow ones.
template <class T, size_t N, class F>
__global__ void map_contiguous_wide(Pointers<T, N> p, int64_t numel, F f) {
  constexpr int kLanes = 16 / sizeof(T);
  struct alignas(16) Pack {
    T lane[kLanes];
  };
  const int64_t packs = numel / kLanes;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = first; i < packs; i += step) {
    Pack in[N > 0 ? N : 1];
    for (size_t k = 0; k < N; ++k) in[k] = reinterpret_cast<const Pack*>(p.in[k])[i];
    Pack out;
    for (int j = 0; j < kLanes; ++j)
      out.lane[j] = [&]<size_t... K>(std::index_sequence<K...>) {
        return cuda_detail::from_acc<T>(f(cuda_detail::to_acc(in[K].lane[j])...));
      }(std::make_index_sequence<N>{});
    reinterpret_cast<Pack*>(p.out)[i] = out;
  }
  for (int64_t i = packs * kLanes + first; i < numel; i += step) {  // the last few elements
    int64_t off[N + 1];
    for (size_t k = 0; k <= N; ++k) off[k] = i;
    apply_at<T, N>(p, off, f, std::make_index_sequence<N>{});
  }
}

template <class T, size_t N, class F>
__global__ void map_strided(Pointers<T, N> p, int64_t numel, StridedIndexer<int(N) + 1> ix, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[N + 1];
    ix.offsets(i, off);
    apply_at<T, N>(p, off, f, std::make_index_sequence<N>{});
  }
}

template <size_t N, class F>
inline void cuda_map_elementwise(const Tensor& out, const std::array<Tensor, N>& inputs, const F& f) {
  detail::check_cuda_device(out.device(), "elementwise op");
  bool contiguous = out.is_contiguous();
  for (const Tensor& t : inputs) {
    HG_CHECK(t.device() == out.device(), "elementwise op: expected all tensors on ", out.device(), ", found ", t.device());
    contiguous = contiguous && t.is_contiguous() && t.shape() == out.shape();
  }
  const int64_t numel = out.numel();
  const char* kernel = "map_strided";
  visit_dtype(out.dtype(), [&]<class T> {
    if constexpr (!is_floating_type_v<T> && !math::kIntegerSafe<F>) {
      HG_FAIL("elementwise op: not defined for ", out.dtype(), " tensors");
    } else {
    Pointers<T, N> p{static_cast<T*>(out.raw_data()), {}};
    for (size_t k = 0; k < N; ++k) p.in[k] = static_cast<const T*>(inputs[k].raw_data());
    bool aligned = reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
    for (size_t k = 0; k < N; ++k) aligned = aligned && reinterpret_cast<uintptr_t>(p.in[k]) % 16 == 0;
    if (contiguous && aligned && 16 % sizeof(T) == 0) {
      kernel = "map_contiguous_wide";
      map_contiguous_wide<T, N, F><<<blocks_for(numel / (16 / sizeof(T)) + 1), kThreads>>>(p, numel, f);
    } else if (contiguous) {
      kernel = "map_contiguous";
      map_contiguous<T, N, F><<<blocks_for(numel), kThreads>>>(p, numel, f);
    } else {
      const auto ix = make_indexer<int(N) + 1>(out, inputs.data(), int(N));
      map_strided<T, N, F><<<blocks_for(numel), kThreads>>>(p, numel, ix, f);
    }
    }
  });
  HG_CHECK_LAUNCH(kernel);
}

}  // namespace hg::kernels::cuda
