// CUDA reductions of a contiguous x viewed as (outer, R, inner) into (outer, inner): sum and mean
// accumulate in double, integer sums exactly in int64 (as on the CPU); amax/argmax keep NaN as
// the largest value and the first maximum. Two shapes of work, so that every SM has something to
// do and reads are coalesced:
//   * rows (inner == 1: sum of a whole tensor, softmax-like last-dim sums): one warp per
//     (output, slice of R); the 32 lanes read consecutive elements.
//   * columns (inner > 1: bias gradients, sum_to over leading dims): a 32 x 8 block per (outer,
//     32 consecutive inner positions, slice of R); a warp reads 32 consecutive elements of one
//     row of the slice, and the 8 warps take every 8th row.
// When there are too few outputs to fill the GPU (a full sum has one), R is cut into slices whose
// partial results a second kernel combines, one block per output. Every combination happens in a
// fixed order, and the slicing depends on the shape only, so results are deterministic.
#include <cfloat>
#include <limits>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::acc_t;
using cuda_detail::to_acc;

// NOTE: the slicing constants depend on nothing but the shape (not on the GPU's SM count), so
// one shape always gives the same combination order and the same bits on every GPU.
constexpr int64_t kTargetWarps = 8192;       // ~ an H200's 132 SMs x 64 resident warps
constexpr int64_t kMinPerWarpSlice = 4096;   // elements: 128 per lane before slicing pays off
constexpr int64_t kTargetBlocks = 1024;      // column blocks of 256 threads
constexpr int kColumnTile = 32, kRowLanes = 8;
constexpr int64_t kMinRowsPerColumnSlice = 256;  // 32 rows per warp of a column block
constexpr int64_t kMaxSlices = 8192;

// ---- the two reductions as (state, combine) pairs --------------------------------------------------

// Floating inputs add in double, integers exactly in int64 (the CPU's rule, kernels/reduce.cpp):
// a double would round an i64 sum past 2^53.
template <class T>
struct SumOp {
  using State = std::conditional_t<is_floating_type_v<T>, double, int64_t>;
  __device__ static State identity() { return State(0); }
  __device__ static State lift(T v, int64_t /*r*/) {
    if constexpr (is_floating_type_v<T>) return double(to_acc(v));
    else return State(v);
  }
  __device__ static State combine(State a, State b) { return a + b; }
  __device__ static State shuffle(State s, int step) { return __shfl_xor_sync(0xffffffffu, s, step); }
};

template <class A>
struct MaxState {
  A value;
  int64_t index;  // kNone: no element seen yet
};
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

// (value, index) pairs ordered by math::max_beats, the CPU's rule: the outcome does not depend on
// the order in which pairs meet (the first NaN, else the first maximum).
template <class T>
struct MaxOp {
  using A = acc_t<T>;
  using State = MaxState<A>;
  __device__ static State identity() { return {A(0), kNone}; }
  __device__ static State lift(T v, int64_t r) { return {to_acc(v), r}; }
  __device__ static bool better(const State& a, const State& b) {  // a beats b
    if (b.index == kNone) return true;
    if (a.index == kNone) return false;
    return math::max_beats(a.value, a.index, b.value, b.index);
  }
  __device__ static State combine(State a, State b) { return better(b, a) ? b : a; }
  __device__ static State shuffle(State s, int step) {
    // NOTE: 8-bit values travel as int (the narrowest shuffle); the cast back is exact.
    using Wire = std::conditional_t<(sizeof(A) < sizeof(int)), int, A>;
    return {A(__shfl_xor_sync(0xffffffffu, Wire(s.value), step)), __shfl_xor_sync(0xffffffffu, s.index, step)};
  }
};

// What to do with an output's final state.
template <class U>
struct SumWriter {
  U* out;
  double divisor;  // R for mean, 1 for sum (NOTE: mean over R = 0 is 0/0 = NaN, as on the CPU)
  template <class State>  // double or int64 (SumOp)
  __device__ void operator()(int64_t o, State total) const {
    if (divisor == 1.0) out[o] = cuda_detail::from_acc<U>(acc_t<U>(total));
    else out[o] = cuda_detail::from_acc<U>(acc_t<U>(double(total) / divisor));
  }
};

template <class T>
struct MaxWriter {
  T* values;         // amax (or null)
  int64_t* indices;  // argmax (or null)
  __device__ void operator()(int64_t o, const MaxState<acc_t<T>>& s) const {
    if (values) values[o] = cuda_detail::from_acc<T>(s.value);
    if (indices) indices[o] = s.index;
  }
};

template <class Op>
__device__ __forceinline__ typename Op::State warp_combine(typename Op::State s) {
  for (int step = kWarp / 2; step > 0; step /= 2) s = Op::combine(s, Op::shuffle(s, step));
  return s;
}

// ---- kernels ----------------------------------------------------------------------------------------

// One warp per (output o, slice s) of rows of length R; item = o * slices + s. A warp's lanes
// share `item`, so a warp returns or stays as one.
template <class Op, class T, class Writer>
__global__ void reduce_rows_kernel(const T* x, int64_t R, int64_t items, int slices, int64_t chunk,
                                   typename Op::State* partial, Writer write) {
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (item >= items) return;
  const int64_t o = item / slices, begin = (item % slices) * chunk, end = min(R, begin + chunk);
  const T* row = x + o * R;
  typename Op::State s = Op::identity();
  for (int64_t r = begin + lane; r < end; r += kWarp) s = Op::combine(s, Op::lift(row[r], r));
  s = warp_combine<Op>(s);
  if (lane != 0) return;
  if (slices == 1) write(o, s);
  else partial[item] = s;
}

// A (kColumnTile, kRowLanes) block per (outer o, tile of 32 inner positions, slice s of R): lane
// x owns column tile * 32 + x, lane y takes rows begin + y, begin + y + 8, ...; the 8 row lanes of
// a column then combine in order through shared memory.
template <class Op, class T, class Writer>
__global__ void reduce_columns_kernel(const T* x, int64_t R, int64_t inner, int64_t tiles, int slices, int64_t chunk,
                                      typename Op::State* partial, Writer write) {
  __shared__ typename Op::State lanes[kRowLanes][kColumnTile];
  const int64_t block = blockIdx.x;
  const int s = int(block % slices);
  const int64_t tile = (block / slices) % tiles, o = block / slices / tiles;
  const int64_t i = tile * kColumnTile + threadIdx.x;
  const int64_t begin = s * chunk, end = min(R, begin + chunk);
  typename Op::State state = Op::identity();
  if (i < inner)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) state = Op::combine(state, Op::lift(x[(o * R + r) * inner + i], r));
  lanes[threadIdx.y][threadIdx.x] = state;
  __syncthreads();
  if (threadIdx.y != 0 || i >= inner) return;
  for (int y = 1; y < kRowLanes; ++y) state = Op::combine(state, lanes[y][threadIdx.x]);
  const int64_t output = o * inner + i;
  if (slices == 1) write(output, state);
  else partial[output * slices + s] = state;
}

// Second stage: one block per output combines its `slices` partial states: thread t takes slices
// t, t + 256, ... in order, then a shared-memory tree in a fixed order.
template <class Op, class Writer>
__global__ void combine_slices_kernel(const typename Op::State* partial, int slices, Writer write) {
  __shared__ typename Op::State tree[kernels::cuda::kThreads];
  const int64_t o = blockIdx.x;
  typename Op::State s = Op::identity();
  for (int k = int(threadIdx.x); k < slices; k += blockDim.x) s = Op::combine(s, partial[o * slices + k]);
  tree[threadIdx.x] = s;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) tree[threadIdx.x] = Op::combine(tree[threadIdx.x], tree[threadIdx.x + step]);
    __syncthreads();
  }
  if (threadIdx.x == 0) write(o, tree[0]);
}

// ---- launchers ----------------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many slices to cut R into when only `items` pieces of work exist (each worth `min_slice`
// elements at least), and the slice length.
struct Slicing {
  int slices;
  int64_t chunk;
};
Slicing slicing(int64_t items, int64_t target, int64_t R, int64_t min_slice) {
  if (R == 0 || items >= target) return {1, R};
  const int64_t wanted = std::min({ceil_div(target, items), ceil_div(R, min_slice), kMaxSlices});
  const int64_t chunk = ceil_div(R, std::max<int64_t>(wanted, 1));
  return {int(ceil_div(R, chunk)), chunk};
}

template <class Op, class T, class Writer>
void launch_reduce(const T* x, int64_t outer, int64_t R, int64_t inner, const Writer& write, Device device) {
  using State = typename Op::State;
  const int64_t outputs = outer * inner;
  Tensor partial;  // the slices' states; returned to the cache after the second kernel is queued
  const auto partial_for = [&](int slices) -> State* {
    if (slices == 1) return nullptr;
    partial = empty({outputs * slices * int64_t(sizeof(State))}, {.dtype = u8, .device = device});
    return static_cast<State*>(partial.raw_data());
  };
  int slices = 1;
  if (inner == 1) {
    const Slicing sl = slicing(outputs, kTargetWarps, R, kMinPerWarpSlice);
    slices = sl.slices;
    const int64_t items = outputs * slices;
    const int64_t blocks = ceil_div(items * kWarp, kernels::cuda::kThreads);
    HG_CHECK(blocks <= INT32_MAX, "reduce: too many outputs for one CUDA grid (", outputs, ")");
    reduce_rows_kernel<Op, T, Writer><<<int(blocks), kernels::cuda::kThreads>>>(x, R, items, slices, sl.chunk,
                                                                             partial_for(slices), write);
    HG_CHECK_LAUNCH("reduce_rows_kernel");
  } else {
    const int64_t tiles = ceil_div(inner, kColumnTile);
    const Slicing sl = slicing(outer * tiles, kTargetBlocks, R, kMinRowsPerColumnSlice);
    slices = sl.slices;
    const int64_t blocks = outer * tiles * slices;
    HG_CHECK(blocks <= INT32_MAX, "reduce: too many outputs for one CUDA grid (", outputs, ")");
    reduce_columns_kernel<Op, T, Writer><<<int(blocks), dim3(kColumnTile, kRowLanes)>>>(
        x, R, inner, tiles, slices, sl.chunk, partial_for(slices), write);
    HG_CHECK_LAUNCH("reduce_columns_kernel");
  }
  if (slices == 1) return;
  combine_slices_kernel<Op, Writer><<<int(outputs), kernels::cuda::kThreads>>>(static_cast<const State*>(partial.raw_data()),
                                                                            slices, write);
  HG_CHECK_LAUNCH("combine_slices_kernel");
}

}  // namespace

void reduce(ReduceKind kind, const Tensor& x, const Tensor& out, int64_t outer, int64_t R, int64_t inner) {
  detail::check_cuda_device(x.device(), "reduce");
  HG_CHECK(x.is_contiguous(), "reduce (CUDA): internal error: the input must be contiguous");
  if (outer * inner == 0) return;
  visit_dtype(x.dtype(), [&]<class T> {
    if (kind == ReduceKind::Sum || kind == ReduceKind::Mean) {
      visit_dtype(out.dtype(), [&]<class U> {
        const SumWriter<U> write{out.data_ptr<U>(), kind == ReduceKind::Mean ? double(R) : 1.0};
        launch_reduce<SumOp<T>>(x.data_ptr<T>(), outer, R, inner, write, x.device());
      });
    } else {
      const bool argmax = kind == ReduceKind::ArgMax;
      const MaxWriter<T> write{argmax ? nullptr : out.data_ptr<T>(), argmax ? out.data_ptr<int64_t>() : nullptr};
      launch_reduce<MaxOp<T>>(x.data_ptr<T>(), outer, R, inner, write, x.device());
    }
  });
}

}  // namespace hg::kernels::cuda
