// CUDA twin of detail::map_elementwise: out[i] = f(a[i], b[i], ...) for T in {f32, f64, f16,
// bf16, i32, i64, u8}, loading T, computing in float (16-bit) or T, storing T. Contiguous
// operands take a plain grid-stride loop; broadcast or strided ones go through the indexer.
// Explicit instantiations at the end: one line per functor of kernels/math/ that ops use.
#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/activation.h"
#include "kernels/math/elementwise.h"

namespace hg::detail {

namespace {

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
__global__ void map_strided(Pointers<T, N> p, int64_t numel, cuda_detail::StridedIndexer<int(N) + 1> ix, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[N + 1];
    ix.offsets(i, off);
    apply_at<T, N>(p, off, f, std::make_index_sequence<N>{});
  }
}

}  // namespace

// Functors that make sense for integer tensors; the others are only instantiated for floating
// dtypes (their constants, e.g. GELU's 1/sqrt(2), do not fit an integer type).
template <class F> inline constexpr bool kIntegerSafe = false;
template <> inline constexpr bool kIntegerSafe<math::Add> = true;
template <> inline constexpr bool kIntegerSafe<math::Sub> = true;
template <> inline constexpr bool kIntegerSafe<math::Mul> = true;
template <> inline constexpr bool kIntegerSafe<math::Neg> = true;
template <> inline constexpr bool kIntegerSafe<math::Abs> = true;
template <> inline constexpr bool kIntegerSafe<math::Sign> = true;
template <> inline constexpr bool kIntegerSafe<math::Equal> = true;
template <> inline constexpr bool kIntegerSafe<math::AddScalar> = true;
template <> inline constexpr bool kIntegerSafe<math::MulScalar> = true;
template <> inline constexpr bool kIntegerSafe<math::AddScaled> = true;

template <size_t N, class F>
void cuda_map_elementwise(const Tensor& out, const std::array<Tensor, N>& inputs, const F& f) {
  check_cuda_device(out.device(), "elementwise op");
  bool contiguous = out.is_contiguous();
  for (const Tensor& t : inputs) {
    HG_CHECK(t.device() == out.device(), "elementwise op: expected all tensors on ", out.device(), ", found ", t.device());
    contiguous = contiguous && t.is_contiguous() && t.shape() == out.shape();
  }
  const int64_t numel = out.numel();
  const char* kernel = "map_strided";
  visit_dtype(out.dtype(), [&]<class T> {
    if constexpr (!is_floating_type_v<T> && !kIntegerSafe<F>) {
      HG_FAIL("elementwise op: not defined for ", out.dtype(), " tensors");
    } else {
    Pointers<T, N> p{static_cast<T*>(out.raw_data()), {}};
    for (size_t k = 0; k < N; ++k) p.in[k] = static_cast<const T*>(inputs[k].raw_data());
    bool aligned = reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
    for (size_t k = 0; k < N; ++k) aligned = aligned && reinterpret_cast<uintptr_t>(p.in[k]) % 16 == 0;
    if (contiguous && aligned && 16 % sizeof(T) == 0) {
      kernel = "map_contiguous_wide";
      map_contiguous_wide<T, N, F><<<cuda_detail::blocks_for(numel / (16 / sizeof(T)) + 1), cuda_detail::kThreads>>>(p, numel, f);
    } else if (contiguous) {
      kernel = "map_contiguous";
      map_contiguous<T, N, F><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(p, numel, f);
    } else {
      const auto ix = cuda_detail::make_indexer<int(N) + 1>(out, inputs.data(), int(N));
      map_strided<T, N, F><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(p, numel, ix, f);
    }
    }
  });
  HG_CHECK_LAUNCH(kernel);
}

// ---- instantiations: every functor an op hands to cuda_map_elementwise ----------------------

template void cuda_map_elementwise<2, math::Add>(const Tensor&, const std::array<Tensor, 2>&, const math::Add&);
template void cuda_map_elementwise<2, math::Sub>(const Tensor&, const std::array<Tensor, 2>&, const math::Sub&);
template void cuda_map_elementwise<2, math::Mul>(const Tensor&, const std::array<Tensor, 2>&, const math::Mul&);
template void cuda_map_elementwise<2, math::Div>(const Tensor&, const std::array<Tensor, 2>&, const math::Div&);
template void cuda_map_elementwise<2, math::Equal>(const Tensor&, const std::array<Tensor, 2>&, const math::Equal&);
template void cuda_map_elementwise<2, math::AddScaled>(const Tensor&, const std::array<Tensor, 2>&, const math::AddScaled&);
template void cuda_map_elementwise<2, math::PowScalarGrad>(const Tensor&, const std::array<Tensor, 2>&, const math::PowScalarGrad&);
template void cuda_map_elementwise<2, math::ClampGrad>(const Tensor&, const std::array<Tensor, 2>&, const math::ClampGrad&);
template void cuda_map_elementwise<3, math::DivGradDenominator>(const Tensor&, const std::array<Tensor, 3>&, const math::DivGradDenominator&);
template void cuda_map_elementwise<1, math::Neg>(const Tensor&, const std::array<Tensor, 1>&, const math::Neg&);
template void cuda_map_elementwise<1, math::Exp>(const Tensor&, const std::array<Tensor, 1>&, const math::Exp&);
template void cuda_map_elementwise<1, math::Log>(const Tensor&, const std::array<Tensor, 1>&, const math::Log&);
template void cuda_map_elementwise<1, math::Sqrt>(const Tensor&, const std::array<Tensor, 1>&, const math::Sqrt&);
template void cuda_map_elementwise<1, math::Abs>(const Tensor&, const std::array<Tensor, 1>&, const math::Abs&);
template void cuda_map_elementwise<1, math::Sign>(const Tensor&, const std::array<Tensor, 1>&, const math::Sign&);
template void cuda_map_elementwise<1, math::AddScalar>(const Tensor&, const std::array<Tensor, 1>&, const math::AddScalar&);
template void cuda_map_elementwise<1, math::MulScalar>(const Tensor&, const std::array<Tensor, 1>&, const math::MulScalar&);
template void cuda_map_elementwise<1, math::DivScalar>(const Tensor&, const std::array<Tensor, 1>&, const math::DivScalar&);
template void cuda_map_elementwise<1, math::PowScalar>(const Tensor&, const std::array<Tensor, 1>&, const math::PowScalar&);
template void cuda_map_elementwise<1, math::Clamp>(const Tensor&, const std::array<Tensor, 1>&, const math::Clamp&);

}  // namespace hg::detail

namespace hg::detail {
// Activations (ops/activation.cpp).
template void cuda_map_elementwise<1, math::Forward<math::Relu>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::Relu>&);
template void cuda_map_elementwise<1, math::Forward<math::LeakyRelu>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::LeakyRelu>&);
template void cuda_map_elementwise<1, math::Forward<math::Gelu>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::Gelu>&);
template void cuda_map_elementwise<1, math::Forward<math::Silu>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::Silu>&);
template void cuda_map_elementwise<1, math::Forward<math::Sigmoid>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::Sigmoid>&);
template void cuda_map_elementwise<1, math::Forward<math::Tanh>>(const Tensor&, const std::array<Tensor, 1>&, const math::Forward<math::Tanh>&);
template void cuda_map_elementwise<2, math::BackwardFromInput<math::Relu>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromInput<math::Relu>&);
template void cuda_map_elementwise<2, math::BackwardFromInput<math::LeakyRelu>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromInput<math::LeakyRelu>&);
template void cuda_map_elementwise<2, math::BackwardFromInput<math::Gelu>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromInput<math::Gelu>&);
template void cuda_map_elementwise<2, math::BackwardFromInput<math::Silu>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromInput<math::Silu>&);
template void cuda_map_elementwise<2, math::BackwardFromOutput<math::Sigmoid>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromOutput<math::Sigmoid>&);
template void cuda_map_elementwise<2, math::BackwardFromOutput<math::Tanh>>(const Tensor&, const std::array<Tensor, 2>&, const math::BackwardFromOutput<math::Tanh>&);
}  // namespace hg::detail

// ---- fill_ ----------------------------------------------------------------------------------------

namespace hg::cuda_kernels {

namespace {

// Word: an unsigned integer as wide as the element; the element's bytes are written as they are.
template <class Word>
__global__ void fill_contiguous_kernel(Word* out, int64_t numel, Word value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class Word>
__global__ void fill_strided_kernel(Word* out, int64_t numel, cuda_detail::StridedIndexer<1> ix, Word value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t offset[1];
    ix.offsets(i, offset);
    out[offset[0]] = value;
  }
}

template <class Word>
void launch_fill(const Tensor& t, uint64_t bits) {
  Word* out = static_cast<Word*>(t.raw_data());
  const int64_t numel = t.numel();
  if (t.is_contiguous()) {
    fill_contiguous_kernel<Word><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(out, numel, Word(bits));
    HG_CHECK_LAUNCH("fill_contiguous_kernel");
  } else {
    const auto ix = cuda_detail::make_indexer<1>(t, nullptr, 0);
    fill_strided_kernel<Word><<<cuda_detail::blocks_for(numel), cuda_detail::kThreads>>>(out, numel, ix, Word(bits));
    HG_CHECK_LAUNCH("fill_strided_kernel");
  }
}

}  // namespace

void fill(const Tensor& t, uint64_t bits) {
  detail::check_cuda_device(t.device(), "fill_");
  if (t.numel() == 0) return;
  const size_t size = element_size(t.dtype());
  if (t.is_contiguous() && (bits == 0 || size == 1)) {  // every byte the same: the driver's memset
    HG_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), int(bits & 0xff), size_t(t.numel()) * size, nullptr));
    return;
  }
  if (size == 1) launch_fill<uint8_t>(t, bits);
  else if (size == 2) launch_fill<uint16_t>(t, bits);
  else if (size == 4) launch_fill<uint32_t>(t, bits);
  else launch_fill<uint64_t>(t, bits);
}

}  // namespace hg::cuda_kernels
