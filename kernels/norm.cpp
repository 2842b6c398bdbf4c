#include "kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/copy.h"
#include "core/parallel.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/activation.h"
#include "kernels/math/norm.h"
#include "kernels/reduce.h"
#include "kernels/relu_bits.h"

namespace hg::kernels {

namespace {

std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(static_cast<size_t>(n), fallback);
}

// Per-channel results in `dtype`, converted straight from the double statistics.
Tensor vector_tensor(const std::vector<double>& v, DType dtype, Device device) {
  return from_vector(v, {int64_t(v.size())}, {.dtype = dtype, .device = device});
}

// ---- batch_norm: groups are channels of x viewed as (N, C, S) -------------------------------------

struct ChannelLayout {
  int64_t N, C, S;
  int64_t count() const { return N * S; }
};

// NOTE: the statistics take one pass over memory. Each row of S values is cut into blocks of up to
// kBlock values (rows shorter than that: a block of as many whole rows of the channel as fit,
// see Block). In L1, one pass over a block finds its mean mb, a second sums d = x - mb and d * d
// in Acc<T> lanes; the block's exact mean is mb + sum(d) / n and its sum of squared deviations
// sum(d * d) - sum(d)^2 / n (the shifted-data formula: with the shift near the mean, sum(d) is
// small and nothing cancels; x - mb stays exact for data far from zero, e.g. 1e4 + noise). The
// blocks are merged in double, in row order (Chan et al.'s pairwise update), so the result does
// not depend on the thread count. Per-element math is f32 for f32 and 16-bit inputs (one vector
// lane per value), f64 for f64. (The running mean as the shift, in one pass, was 2.5e-5 off with
// outliers first: docs/results.md section 26.)
//
// Blocks of 4096 values: each of the 32 lanes adds 128 values of d, small since mb is the block's
// mean. A block's fixed costs -- six 16-lane sums in double, each a chain of adds, and its merge
// -- took more time than its values at 1024 (which left a 28x28 map one row per block):
// batch_norm + ReLU forward on 128 x 16 x 28 x 28, 1 thread, 0.95 -> 0.71 ms in f32, 1.16 ->
// 1.04 in bf16. The backward's blocks (two sums each) are the same.
constexpr int64_t kBlock = 4096;
constexpr int64_t kAccLanes = 16;

// Count, mean and sum of squared deviations of the values seen so far, in double.
struct Moments {
  double count = 0, mean = 0, m2 = 0;
  void merge(double n, double block_mean, double block_m2) {
    const double total = count + n, delta = block_mean - mean;
    mean += delta * (n / total);
    m2 += block_m2 + delta * delta * (count * n / total);
    count = total;
  }
};

// One block of a channel's values: `runs` runs of `len` values, run r starting at start + r * stride
// in elements -- a slice of one row (runs = 1), or whole rows of consecutive images where a row is
// shorter than kBlock. (Alone, a 7x7 map's 49 values left each block's fixed costs -- its lane
// combinations and merges -- above its arithmetic.)
struct Block {
  int64_t start, runs, stride, len;
  int64_t count() const { return runs * len; }
};

// Calls body(block) for channel c's blocks, in image and row order (fixed by the shape alone).
template <class Body>
void for_each_block(const ChannelLayout& l, int64_t c, const Body& body) {
  const int64_t row_stride = l.C * l.S;  // from one image's row of channel c to the next's
  if (l.S >= kBlock) {
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t s = 0; s < l.S; s += kBlock) body(Block{(n * l.C + c) * l.S + s, 1, 0, std::min(kBlock, l.S - s)});
    return;
  }
  const int64_t rows_per_block = kBlock / std::max<int64_t>(l.S, 1);
  for (int64_t n = 0; n < l.N; n += rows_per_block)
    body(Block{(n * l.C + c) * l.S, std::min(rows_per_block, l.N - n), row_stride, l.S});
}

// The lanes of kernels/cpu/float_lanes.h (one AVX-512 register, two AVX2 or four SSE/NEON ones;
// each lane's arithmetic is the scalar lane's). Written as 16-lane loops, GCC vectorised the sums
// of x - s and its square into shuffles and scalar adds: 1.3 ns per value.
using cpu::FloatLanes;
static_assert(cpu::kFloatLanes == kAccLanes);
using LaneIndex = int32_t __attribute__((vector_size(kAccLanes * sizeof(int32_t))));

// (always_inline: left as calls, the sums around them went through the stack.)
template <class T>
[[gnu::always_inline]] inline void load_lanes(const T* p, FloatLanes& lanes) {
  if constexpr (std::is_same_v<T, bfloat16>) {  // widened in the vector: bf16 is f32's top half
    using Bits16 = uint16_t __attribute__((vector_size(kAccLanes * sizeof(uint16_t))));
    using Bits32 = uint32_t __attribute__((vector_size(kAccLanes * sizeof(uint32_t))));
    Bits16 bits;
    std::memcpy(&bits, p, sizeof bits);
    const Bits32 wide = __builtin_convertvector(bits, Bits32) << 16;
    std::memcpy(&lanes, &wide, sizeof lanes);
  } else {
    float v[kAccLanes];
    for (int64_t k = 0; k < kAccLanes; ++k) v[k] = float(p[k]);
    std::memcpy(&lanes, v, sizeof lanes);
  }
}
// The last m < kAccLanes values of a run of len values (run + len - m, ...), widened to float,
// the other lanes set to `fill`. A run of kAccLanes values or more gives them as the run's last
// vector, its first kAccLanes - m lanes (values already added) replaced by a compare and a blend;
// built lane by lane, the vector's load waited for 16 scalar stores.
template <class T>
[[gnu::always_inline]] inline void load_last(const T* run, int64_t len, int64_t m, float fill, FloatLanes& lanes) {
  if (len >= kAccLanes) {
    LaneIndex index;
    for (int32_t k = 0; k < int32_t(kAccLanes); ++k) index[k] = k;
    FloatLanes v;
    load_lanes(run + len - kAccLanes, v);
    const FloatLanes f = FloatLanes{} + fill;
    lanes = index < int32_t(kAccLanes - m) ? f : v;
    return;
  }
  float v[kAccLanes];
  for (int64_t k = 0; k < kAccLanes; ++k) v[k] = k < m ? float(run[len - m + k]) : fill;
  std::memcpy(&lanes, v, sizeof lanes);
}
// The lanes added up as lane_sum.h's are: one after another, in double.
double combine_lanes(const FloatLanes& lanes) {
  float v[kAccLanes];
  std::memcpy(v, &lanes, sizeof v);
  return cpu::combine_lanes(v);
}

// A vector's worth of a block's values: `at` in elements (the offsets of x, which every array the
// block is read from shares), either a full vector there (last == 0) or the last `last` values of
// the run of run_len values starting at `at` (load_last).
struct LaneGroup {
  int64_t at, run_len, last;
  template <class T>
  [[gnu::always_inline]] void load(const T* data, float fill, FloatLanes& v) const {
    if (last == 0) load_lanes(data + at, v);
    else load_last(data + at, run_len, last, fill, v);
  }
};

// Calls visit(group, half) for the block's values a vector at a time, half 0 and 1 taking turns
// within a run, so that the caller can keep two independent sums: one chain of vector adds waits
// 4 cycles per add.
template <class Visit>
void for_each_lane_group(const Block& block, const Visit& visit) {
  constexpr std::integral_constant<int, 0> first;
  constexpr std::integral_constant<int, 1> second;
  for (int64_t r = 0; r < block.runs; ++r) {
    const int64_t base = block.start + r * block.stride;
    int64_t i = 0;
    for (; i + 2 * kAccLanes <= block.len; i += 2 * kAccLanes) {
      visit(LaneGroup{base + i, 0, 0}, first);
      visit(LaneGroup{base + i + kAccLanes, 0, 0}, second);
    }
    if (i + kAccLanes <= block.len) visit(LaneGroup{base + i, 0, 0}, first), i += kAccLanes;
    if (i < block.len) visit(LaneGroup{base, block.len, block.len - i}, second);
  }
}

// The block's sum of its values, and with s = that sum / n in Acc<T>, its sums of d = x - s and d
// * d, in Acc<T> lanes combined in double. Acc<T> is float for every type but f64, whose lanes are
// plain arrays (cpu::lane_accumulate).
struct BlockSums {
  double mean, sum_d, sum_d2;
};
template <class T>
BlockSums block_sums(const T* x, const Block& block) {
  using A = Acc<T>;
  const double n = double(block.count());
  if constexpr (std::is_same_v<A, float>) {
    FloatLanes sum[2] = {};
    for_each_lane_group(block, [&](const LaneGroup& group, auto half) {
      FloatLanes v;
      group.load(x, 0.0f, v);
      sum[half] += v;
    });
    const float mb = float((combine_lanes(sum[0]) + combine_lanes(sum[1])) / n);
    // Lanes past a run's end hold mb: d = +0, which leaves any sum that started from +0 as it was.
    FloatLanes sum_d[2] = {}, sum_d2[2] = {};
    const FloatLanes s = FloatLanes{} + mb;
    for_each_lane_group(block, [&](const LaneGroup& group, auto half) {
      FloatLanes v;
      group.load(x, mb, v);
      const FloatLanes d = v - s;
      sum_d[half] += d;
      sum_d2[half] += d * d;
    });
    return {mb, combine_lanes(sum_d[0]) + combine_lanes(sum_d[1]), combine_lanes(sum_d2[0]) + combine_lanes(sum_d2[1])};
  } else {
    A lanes[kAccLanes] = {};
    for (int64_t r = 0; r < block.runs; ++r) {
      const T* run = x + block.start + r * block.stride;
      cpu::lane_accumulate(lanes, block.len, [run](int64_t i) { return A(run[i]); });
    }
    const A mb = A(cpu::combine_lanes(lanes) / n);
    A lanes_d[kAccLanes] = {}, lanes_d2[kAccLanes] = {};
    for (int64_t r = 0; r < block.runs; ++r) {
      const T* run = x + block.start + r * block.stride;
      cpu::lane_accumulate_pair(lanes_d, lanes_d2, block.len, [run, mb](int64_t i) {
        const A d = A(run[i]) - mb;
        return std::pair<A, A>{d, d * d};
      });
    }
    return {double(mb), cpu::combine_lanes(lanes_d), cpu::combine_lanes(lanes_d2)};
  }
}

template <class T>
void add_block(const T* x, const Block& block, Moments& moments) {
  const double n = double(block.count());
  const BlockSums sums = block_sums(x, block);
  const double m2 = sums.sum_d2 - sums.sum_d * sums.sum_d / n;
  moments.merge(n, sums.mean + sums.sum_d / n, m2 < 0 ? 0.0 : m2);  // a NaN stays NaN
}

// Channel c's mean and (biased) variance.
template <class T>
void channel_moments(const T* x, const ChannelLayout& l, int64_t c, std::vector<double>& mean, std::vector<double>& var) {
  Moments moments;
  for_each_block(l, c, [&](const Block& block) { add_block(x, block, moments); });
  mean[size_t(c)] = moments.mean;
  var[size_t(c)] = moments.m2 / moments.count;
}

// v rounded to T and back, in place: a value as the next op reads it from a T tensor (nothing to
// do for f32 and f64). core/half.h's round_through rounds exactly as the SIMD converters of
// map_run's chunks (kernels/cpu/elementwise_loop.h) do, so the fused passes round as the separate
// ops do, NaN included.
template <class T>
void round_through(Acc<T>* v, int64_t m) {
  if constexpr (!std::is_same_v<T, Acc<T>>) hg::round_through<T>(v, size_t(m));
}

// The epilogue's forward and backward, each by its op's own functor (NaN stays NaN): relu, and
// relu6 = hardtanh(0, 6). The backward reads the activation's output, not its input: for relu6
// 0 < y < 6 exactly where 0 < x < 6 (y is 0 for x <= 0, 6 for x >= 6, NaN for NaN), the test
// hardtanh's backward makes on x.
template <NormActivation kAct, class A>
A activate(A v) {
  if constexpr (kAct == NormActivation::Relu) return math::Relu::fwd(v);
  else if constexpr (kAct == NormActivation::Relu6) return math::Hardtanh{0.0, 6.0}.fwd(v);
  else return v;
}
template <NormActivation kAct, class A>
A activation_gradient(A y, A g) {
  if constexpr (kAct == NormActivation::Relu) return math::Relu::bwd(y, g);
  // hardtanh(0, 6)'s test 0 < y < 6 as one compare, min(y, 6 - y) > 0 (false at 0, 6 and NaN as
  // well): with two, GCC left the sums of batch_norm's backward scalar (2.5x its relu time)
  else if constexpr (kAct == NormActivation::Relu6) return std::min(y, A(6) - y) > A(0) ? g : A(0);
  else return g;
}

// Chunk [at, at + m) (m <= kChunk) of x into y, in Acc<T>: affine(v, in, m) writes v[i] =
// in[i] * scale + shift with each value's channel's coefficients; plus the residual, added to
// that value rounded to T (an add after batch_norm reads batch_norm's T output); then the
// activation of the rounded sum. 16-bit values are widened and rounded with the SIMD converters,
// as map_run does: the fused result is activation(batch_norm(x) [+ residual]) bit for bit.
template <class T, NormActivation kAct, class Affine>
[[gnu::always_inline]] inline void affine_chunk(const T* x, const T* residual, T* y, int64_t at, int64_t m,
                                                const Affine& affine) {
  using A = Acc<T>;
  alignas(64) A inputs[kChunk], added[kChunk], results[kChunk];
  const A* in = load_chunk<T>(reinterpret_cast<const char*>(x + at), sizeof(T), m, inputs);
  A* v = std::is_same_v<T, A> ? reinterpret_cast<A*>(y + at) : results;  // f32/f64: in place
  affine(v, in, m);
  if (residual != nullptr) {
    round_through<T>(v, m);
    const A* r = load_chunk<T>(reinterpret_cast<const char*>(residual + at), sizeof(T), m, added);
    for (int64_t i = 0; i < m; ++i) v[i] = v[i] + r[i];
  }
  if constexpr (kAct != NormActivation::None) {
    round_through<T>(v, m);
    for (int64_t i = 0; i < m; ++i) v[i] = activate<kAct>(v[i]);
  }
  if (!std::is_same_v<T, A>) store_chunk<T>(v, reinterpret_cast<char*>(y + at), sizeof(T), m);
}

// y = x * scale[c] + shift[c] (scale = w * rstd, shift = b - mean * scale), by affine_chunk, for
// every channel.
template <class T, NormActivation kAct>
void channel_affine(const T* x, const T* residual, T* y, const ChannelLayout& l, const std::vector<double>& scale,
                    const std::vector<double>& shift) {
  using A = Acc<T>;
  // Chunks of one image's C * S values, each chunk's rows of channels getting their own scale and
  // shift: a chunk may span several short rows (chunk by row, a 7x7 map's rows of 49 values paid
  // the chunk's conversions and loop set-up once per 49 values). Every value's arithmetic is
  // the same either way.
  const int64_t per_image = l.C * l.S, chunks = (per_image + kChunk - 1) / kChunk;
  parallel_for(0, l.N * chunks, grain_for(kChunk), [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t j = task % chunks * kChunk, m = std::min(kChunk, per_image - j), at = task / chunks * per_image + j;
      affine_chunk<T, kAct>(x, residual, y, at, m, [&](A* v, const A* in, int64_t count) {
        for (int64_t i = 0; i < count;) {  // the chunk's runs of one channel
          const int64_t c = (j + i) / l.S, end = std::min(count, (c + 1) * l.S - j);
          const A a = A(scale[size_t(c)]), b = A(shift[size_t(c)]);
          for (; i < end; ++i) v[i] = in[i] * a + b;
        }
      });
    }
  });
}

// f32 and f64 rows at least this long go channel by channel in the training forward
// (one_channel_affine): shorter ones would pay affine_chunk's set-up per row (see
// channel_affine). batch_norm + ReLU forward, 128 x 32 x 14 x 14 f32, 1 thread: 0.40 -> 0.35 ms.
constexpr int64_t kRowsByChannel = 128;

// The same for channel c alone, row by row: the training forward's, right after the channel's
// statistics, while its N * S values are still in L2.
template <class T, NormActivation kAct>
void one_channel_affine(const T* x, const T* residual, T* y, const ChannelLayout& l, int64_t c, double scale,
                        double shift) {
  using A = Acc<T>;
  const A a = A(scale), b = A(shift);
  for (int64_t n = 0; n < l.N; ++n)
    for (int64_t s = 0; s < l.S; s += kChunk)
      affine_chunk<T, kAct>(x, residual, y, (n * l.C + c) * l.S + s, std::min(kChunk, l.S - s),
                            [&](A* v, const A* in, int64_t count) {
                              for (int64_t i = 0; i < count; ++i) v[i] = in[i] * a + b;
                            });
}

// Calls f.template operator()<kAct>() with `activation` as the template argument (one loop per
// activation, none of them testing it per value).
template <class F>
void with_activation(NormActivation activation, const F& f) {
  switch (activation) {
    case NormActivation::None: return f.template operator()<NormActivation::None>();
    case NormActivation::Relu: return f.template operator()<NormActivation::Relu>();
    case NormActivation::Relu6: return f.template operator()<NormActivation::Relu6>();
  }
}

// What the backward reads: x, the incoming gradient and, after an epilogue, the fused op's
// output, which says where the activation passed the gradient.
template <class T, NormActivation kAct>
struct BackwardInputs {
  using Value = T;
  static constexpr NormActivation kActivation = kAct;
  const T *x, *g, *activation_out;
  Acc<T> grad(int64_t k) const {
    using A = Acc<T>;
    if constexpr (kAct == NormActivation::None) return A(g[k]);
    else return activation_gradient<kAct>(A(activation_out[k]), A(g[k]));
  }
};

// activation_gradient of each lane (y the activation's output).
template <NormActivation kAct>
void activation_gradient_lanes(const FloatLanes& y, FloatLanes& g) {
  const FloatLanes zero = {};
  if constexpr (kAct == NormActivation::Relu) {
    g = y > zero ? g : zero;
  } else if constexpr (kAct == NormActivation::Relu6) {
    const FloatLanes rest = 6.0f - y, smaller = rest < y ? rest : y;  // std::min(y, 6 - y)
    g = smaller > zero ? g : zero;
  }
}

// A channel's sum(g) and sum(g * (x - mean)) in double, from Acc<T> lanes per block of a row;
// x - mean is taken against mean rounded to Acc<T> (mean_acc) and corrected in double.
template <class Inputs>
math::Normalization::GradientSums channel_gradient_sums(const Inputs& in, const ChannelLayout& l, int64_t c,
                                                        double mean, double rstd) {
  using A = Acc<typename Inputs::Value>;
  const A mean_acc = A(mean);
  double sum_g = 0, sum_gd = 0;
  if constexpr (std::is_same_v<A, float>) {  // on FloatLanes, as the forward's statistics
    const FloatLanes m = FloatLanes{} + mean_acc;
    for_each_block(l, c, [&](const Block& block) {
      FloatLanes lanes_g[2] = {}, lanes_gd[2] = {};
      for_each_lane_group(block, [&](const LaneGroup& group, auto half) {
        // (past a run's last values: g = 0 and x = the mean, so nothing is added)
        FloatLanes g, x;
        group.load(in.g, 0.0f, g);
        group.load(in.x, mean_acc, x);
        if constexpr (Inputs::kActivation != NormActivation::None) {
          FloatLanes y;
          group.load(in.activation_out, 0.0f, y);
          activation_gradient_lanes<Inputs::kActivation>(y, g);
        }
        lanes_g[half] += g;
        lanes_gd[half] += g * (x - m);
      });
      sum_g += combine_lanes(lanes_g[0]) + combine_lanes(lanes_g[1]);
      sum_gd += combine_lanes(lanes_gd[0]) + combine_lanes(lanes_gd[1]);
    });
    return {sum_g, rstd * (sum_gd + (double(mean_acc) - mean) * sum_g)};
  }
  for_each_block(l, c, [&](const Block& block) {
    A lanes_g[kAccLanes] = {}, lanes_gd[kAccLanes] = {};
    for (int64_t r = 0; r < block.runs; ++r) {
      const int64_t base = block.start + r * block.stride;
      cpu::lane_accumulate_pair(lanes_g, lanes_gd, block.len, [&](int64_t i) {
        const A g = in.grad(base + i);
        return std::pair<A, A>{g, g * (A(in.x[base + i]) - mean_acc)};
      });
    }
    sum_g += cpu::combine_lanes(lanes_g);
    sum_gd += cpu::combine_lanes(lanes_gd);
  });
  return {sum_g, rstd * (sum_gd + (double(mean_acc) - mean) * sum_g)};
}

template <class T, class Inputs>
void batch_norm_backward_kernel(const Inputs& in, const ChannelLayout& l, const std::vector<double>& mean,
                                const std::vector<double>& rstd, const std::vector<double>& w, bool training, T* dx,
                                std::vector<double>& dw, std::vector<double>& db) {
  using A = Acc<T>;
  parallel_for(0, l.C, grain_for(3 * l.count()), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const double m = mean[size_t(c)], r = rstd[size_t(c)];
      const math::Normalization::GradientSums sums = channel_gradient_sums(in, l, c, m, r);
      dw[size_t(c)] = sums.g_xhat;
      db[size_t(c)] = sums.g;
      if (dx == nullptr) continue;
      // math::Normalization::input_grad expanded to dx = kg * g + kx * (x - mean_acc) + k0, its
      // per-channel coefficients in double and the per-value multiply-adds in Acc<T>.
      const double M = double(l.count()), wc = w[size_t(c)];
      const A mean_acc = A(m);
      const double kx = training ? -wc * r * r * sums.g_xhat / M : 0.0;
      const A kg = A(wc * r), kxa = A(kx), k0 = A(training ? -wc * r * sums.g / M + kx * (double(mean_acc) - m) : 0.0);
      for (int64_t n = 0; n < l.N; ++n) {
        const int64_t row = (n * l.C + c) * l.S;
        if (!training) {
          for (int64_t s = 0; s < l.S; ++s) dx[row + s] = T(kg * in.grad(row + s));
          continue;
        }
        for (int64_t s = 0; s < l.S; ++s)
          dx[row + s] = T(kg * in.grad(row + s) + (kxa * (A(in.x[row + s]) - mean_acc) + k0));
      }
    }
  });
}

// ---- layer_norm and group_norm: groups are rows of x viewed as (rows, D) ----------------------------

// Which affine parameter each value of a row uses. A row is `channels` runs of `spatial` values,
// and row r's first run uses parameter (r % groups) * channels. layer_norm: one parameter per
// value (groups 1, channels D, spatial 1); group_norm: rows are (image, group) pairs and every
// value of a channel shares its parameter.
struct RowAffine {
  int64_t groups, channels, spatial;
  int64_t first(int64_t r) const { return (r % groups) * channels; }
};

// Value j's channel within a row, j / spatial, for group_norm (the division done once per call);
// empty for layer_norm, whose values are their own channels.
std::vector<size_t> channel_of_values(const RowAffine& a, int64_t D) {
  std::vector<size_t> channel_of(a.spatial == 1 ? 0 : size_t(D));
  for (size_t j = 0; j < channel_of.size(); ++j) channel_of[j] = j / size_t(a.spatial);
  return channel_of;
}

// Calls body(param), param(j) being value j's parameter in row r: for layer_norm a.first(r) + j, a
// plain index, so that the compiler vectorises the row's loops (through the lookup table they
// stayed scalar: layer_norm's forward and backward were 11% of a char-GPT step); for group_norm
// a.first(r) + channel_of[j].
template <class Body>
void for_each_parameter_layout(const RowAffine& a, const std::vector<size_t>& channel_of, int64_t r, const Body& body) {
  const size_t first = size_t(a.first(r));
  if (a.spatial == 1) return body([first](int64_t j) { return first + size_t(j); });
  body([first, of = channel_of.data()](int64_t j) { return first + of[j]; });
}

template <class T>
void row_norm_forward_kernel(const T* x, T* y, int64_t rows, int64_t D, double eps, const RowAffine& a,
                             const std::vector<double>& w, const std::vector<double>& b, std::vector<double>& mean,
                             std::vector<double>& rstd) {
  const std::vector<size_t> channel_of = channel_of_values(a, D);
  parallel_for(0, rows, grain_for(8 * D), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* row = x + r * D;
      const double m = cpu::lane_sum(D, [&](int64_t j) { return double(Acc<T>(row[j])); }) / double(D);
      const double squares = cpu::lane_sum(D, [&](int64_t j) {
        const double d = double(Acc<T>(row[j])) - m;
        return d * d;
      });
      const double rs = math::Normalization::rstd(squares / double(D), eps);
      mean[size_t(r)] = m;
      rstd[size_t(r)] = rs;
      const auto normalise = [&](auto param) {
        for (int64_t j = 0; j < D; ++j)
          y[r * D + j] = T(Acc<T>((double(Acc<T>(row[j])) - m) * rs * w[param(j)] + b[param(j)]));
      };
      for_each_parameter_layout(a, channel_of, r, normalise);
    }
  });
}

constexpr int64_t kRowsPerPartial = 64;  // fixed: dw/db partial sums do not depend on thread count

template <class T>
void row_norm_backward_kernel(const T* x, const T* g, int64_t rows, int64_t D, const RowAffine& a,
                              const std::vector<double>& w, const std::vector<double>& mean,
                              const std::vector<double>& rstd, T* dx, std::vector<double>& dw, std::vector<double>& db) {
  const int64_t parts = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
  std::vector<std::vector<double>> pw(static_cast<size_t>(parts), std::vector<double>(w.size()));
  std::vector<std::vector<double>> pb = pw;
  const std::vector<size_t> channel_of = channel_of_values(a, D);
  parallel_chunks(rows, kRowsPerPartial, [&](int64_t part, int64_t lo, int64_t hi) {
    double* part_w = pw[size_t(part)].data();
    double* part_b = pb[size_t(part)].data();
    for (int64_t r = lo; r < hi; ++r) {
      const double m = mean[size_t(r)], rs = rstd[size_t(r)];
      const T* g_row = g + r * D;
      const T* x_row = x + r * D;
      const auto backward_row = [&](auto param) {
        const auto gh = [&](int64_t j) { return double(Acc<T>(g_row[j])) * w[param(j)]; };
        const auto xhat = [&](int64_t j) { return (double(Acc<T>(x_row[j])) - m) * rs; };
        const double sum_gh = cpu::lane_sum(D, gh);
        const double sum_gh_xhat = cpu::lane_sum(D, [&](int64_t j) { return gh(j) * xhat(j); });
        for (int64_t j = 0; j < D; ++j) {
          const double gv = double(Acc<T>(g_row[j]));
          part_w[param(j)] += gv * xhat(j);
          part_b[param(j)] += gv;
        }
        for (int64_t j = 0; j < D; ++j)
          dx[r * D + j] = T(Acc<T>(
              math::Normalization::input_grad(1.0, rs, double(D), gh(j), xhat(j), sum_gh, sum_gh_xhat)));
      };
      for_each_parameter_layout(a, channel_of, r, backward_row);
    }
  });
  for (int64_t part = 0; part < parts; ++part)
    for (size_t k = 0; k < w.size(); ++k) dw[k] += pw[size_t(part)][k], db[k] += pb[size_t(part)][k];
}

// The weight's values as doubles (1 without a weight), the dtype the parameter gradients take.
std::vector<double> weight_values(const Tensor& weight, int64_t n) { return values_or(weight, n, 1.0); }
DType parameter_dtype(const Tensor& weight) { return weight.defined() ? weight.dtype() : TensorOptions{}.dtype; }

}  // namespace

// ---- batch_norm ------------------------------------------------------------------------------------

Tensor batch_norm_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                          const Tensor& bias, bool training, double momentum, double eps, NormStatistics& stats,
                          NormActivation activation, const Tensor& residual) {
  if (x.device().is_cuda()) {
    HG_CHECK(activation == NormActivation::None && !residual.defined(), "batch_norm: the CUDA kernel has no epilogue (ops/norm.cpp composes it)");
    Tensor out = kernels::cuda::batch_norm_forward(x, running_mean, running_var, weight, bias, training, momentum, eps,
                                                  stats.mean_t, stats.rstd_t);
    if (training)  // the kernel wrote the running statistics in place
      for (const Tensor* t : {&running_mean, &running_var})
        if (t->defined()) t->impl()->storage->bump_version();
    return out;
  }
  const int64_t C = x.shape()[1];
  int64_t spatial = 1;
  for (int d = 2; d < x.dim(); ++d) spatial *= x.shape()[d];
  const ChannelLayout l{x.shape()[0], C, spatial};
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
  if (!training) {
    mean = running_mean.to_vector<double>();
    var = running_var.to_vector<double>();
  }
  const std::vector<double> w = weight_values(weight, C), b = values_or(bias, C, 0.0);
  std::vector<double> rstd(static_cast<size_t>(C)), scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  const auto fold = [&](int64_t c) {
    rstd[size_t(c)] = math::Normalization::rstd(var[size_t(c)], eps);
    const math::Normalization::Affine affine = math::Normalization::fold(mean[size_t(c)], rstd[size_t(c)], w[size_t(c)], b[size_t(c)]);
    scale[size_t(c)] = affine.scale;
    shift[size_t(c)] = affine.shift;
  };
  Tensor out = empty(x.shape(), x.options());
  visit_floating(x.dtype(), "batch_norm", [&]<class T> {
    const T* add = residual.defined() ? residual.data_ptr<T>() : nullptr;
    with_activation(activation, [&]<NormActivation kAct> {
      if (std::is_same_v<T, Acc<T>> && training && l.S >= kRowsByChannel) {
        // A channel's statistics, then its output, while its values are in L2: the output pass
        // reads x from there instead of memory. (16-bit values: no gain measured, their pass
        // costs its conversions more than its reads.)
        parallel_for(0, C, grain_for(3 * l.count()), [&](int64_t lo, int64_t hi) {
          for (int64_t c = lo; c < hi; ++c) {
            channel_moments<T>(x.data_ptr<T>(), l, c, mean, var);
            fold(c);
            one_channel_affine<T, kAct>(x.data_ptr<T>(), add, out.data_ptr<T>(), l, c, scale[size_t(c)], shift[size_t(c)]);
          }
        });
        return;
      }
      if (training)
        parallel_for(0, C, grain_for(2 * l.count()), [&](int64_t lo, int64_t hi) {
          for (int64_t c = lo; c < hi; ++c) channel_moments<T>(x.data_ptr<T>(), l, c, mean, var);
        });
      for (int64_t c = 0; c < C; ++c) fold(c);
      channel_affine<T, kAct>(x.data_ptr<T>(), add, out.data_ptr<T>(), l, scale, shift);
    });
  });
  if (training) {
    // The running statistics are buffers, updated in place.
    const auto update = [&](const Tensor& running, auto rule) {
      if (!running.defined()) return;
      std::vector<double> r = running.to_vector<double>();
      for (int64_t c = 0; c < C; ++c) r[size_t(c)] = rule(r[size_t(c)], c);
      detail::copy_into(running, vector_tensor(r, running.dtype(), x.device()));
      running.impl()->storage->bump_version();
    };
    using math::Normalization;
    update(running_mean, [&](double r, int64_t c) { return Normalization::running_mean(r, mean[size_t(c)], momentum); });
    update(running_var, [&](double r, int64_t c) {
      return Normalization::running_var(r, var[size_t(c)], double(l.count()), momentum);
    });
  }
  stats.mean = std::move(mean);
  stats.rstd = std::move(rstd);
  return out;
}

NormGradients batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  bool training, NormActivation activation, const Tensor& activation_output,
                                  bool residual) {
  HG_CHECK((activation == NormActivation::None) != activation_output.defined(),
           "batch_norm: the backward of an epilogue reads the fused output (and only then)");
  NormGradients out;
  if (residual) {
    // The residual's gradient is the masked gradient itself (the activation's own backward
    // kernel, on its output), and batch_norm's backward reads it instead of masking again.
    // (f16 and bf16 on the CPU: selected as bits, kernels/relu_bits.h.)
    const auto masked_by = [&](auto rule, double max) {
      return relu_bits_apply(x) ? relu_backward_bits(activation_output, grad, max)
                                : map_to_new<2>(x.shape(), {activation_output, detail::dense(grad)}, rule);
    };
    const Tensor masked = activation == NormActivation::Relu    ? masked_by(math::BackwardFromInput<math::Relu>{}, INFINITY)
                          : activation == NormActivation::Relu6 ? masked_by(math::BackwardFromInput<math::Hardtanh>{{0.0, 6.0}}, 6.0)
                                                                : detail::dense(grad);
    out = batch_norm_backward(x, masked, weight, stats, training);
    out.dresidual = masked;
    return out;
  }
  if (x.device().is_cuda()) {
    HG_CHECK(activation == NormActivation::None, "batch_norm: the CUDA kernel has no epilogue (ops/norm.cpp composes it)");
    kernels::cuda::batch_norm_backward(x, grad, weight, stats.mean_t, stats.rstd_t, training, out.dx, out.dw, out.db);
    return out;
  }
  const int64_t C = x.shape()[1];
  int64_t spatial = 1;
  for (int d = 2; d < x.dim(); ++d) spatial *= x.shape()[d];
  const ChannelLayout l{x.shape()[0], C, spatial};
  const std::vector<double> w = weight_values(weight, C);
  out.dx = empty(x.shape(), x.options());
  std::vector<double> dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  visit_floating(x.dtype(), "batch_norm", [&]<class T> {
    with_activation(activation, [&]<NormActivation kAct> {
      const BackwardInputs<T, kAct> in{x.data_ptr<T>(), grad.data_ptr<T>(),
                                       kAct == NormActivation::None ? nullptr : activation_output.data_ptr<T>()};
      batch_norm_backward_kernel<T>(in, l, stats.mean, stats.rstd, w, training, out.dx.data_ptr<T>(), dw, db);
    });
  });
  out.dw = vector_tensor(dw, parameter_dtype(weight), x.device());
  out.db = vector_tensor(db, parameter_dtype(weight), x.device());
  return out;
}

// ---- layer_norm ------------------------------------------------------------------------------------

Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t rows, int64_t D, double eps,
                          NormStatistics& stats) {
  if (x.device().is_cuda()) return kernels::cuda::layer_norm_forward(x, weight, bias, rows, D, eps, stats.mean_t, stats.rstd_t);
  const std::vector<double> w = weight_values(weight, D);
  const std::vector<double> b = values_or(bias, D, 0.0);
  stats.mean.assign(static_cast<size_t>(rows), 0.0);
  stats.rstd.assign(static_cast<size_t>(rows), 0.0);
  Tensor out = empty(x.shape(), x.options());
  visit_floating(x.dtype(), "layer_norm", [&]<class T> {
    row_norm_forward_kernel<T>(x.data_ptr<T>(), out.data_ptr<T>(), rows, D, eps, {1, D, 1}, w, b, stats.mean, stats.rstd);
  });
  return out;
}

NormGradients layer_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  int64_t rows, int64_t D) {
  NormGradients out;
  if (x.device().is_cuda()) {
    kernels::cuda::layer_norm_backward(x, grad, weight, stats.mean_t, stats.rstd_t, rows, D, out.dx, out.dw, out.db);
    return out;
  }
  const std::vector<double> w = weight_values(weight, D);
  out.dx = empty(x.shape(), x.options());
  std::vector<double> dw(static_cast<size_t>(D)), db(static_cast<size_t>(D));
  visit_floating(x.dtype(), "layer_norm", [&]<class T> {
    row_norm_backward_kernel<T>(x.data_ptr<T>(), grad.data_ptr<T>(), rows, D, {1, D, 1}, w, stats.mean, stats.rstd,
                                out.dx.data_ptr<T>(), dw, db);
  });
  out.dw = vector_tensor(dw, parameter_dtype(weight), x.device());
  out.db = vector_tensor(db, parameter_dtype(weight), x.device());
  return out;
}

// ---- group_norm ------------------------------------------------------------------------------------
//
// x (N, C, S...) viewed as N * groups rows of C / groups channels of S values. On a GPU it is
// composed of the layer_norm kernel (rows, no affine) and elementwise kernels for the per-channel
// affine; the CPU runs the row kernels above with the channels' parameters.

namespace {

struct GroupLayout {
  int64_t N, C, S, groups;
  int64_t rows() const { return N * groups; }
  int64_t D() const { return C / groups * S; }
  RowAffine affine() const { return {groups, C / groups, S}; }
};

GroupLayout group_layout(const Tensor& x, int64_t groups) {
  int64_t S = 1;
  for (int d = 2; d < x.dim(); ++d) S *= x.shape()[d];
  return {x.shape()[0], x.shape()[1], S, groups};
}

// A (C) parameter laid out to broadcast against x: (1, C, 1, ...), in x's dtype.
Tensor per_channel(const Tensor& p, const Tensor& x) {
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.shape()[1];
  return detail::dense_view(detail::copy_with_options(p, {.dtype = x.dtype(), .device = x.device()}), shape);
}

struct AffineMath {  // xhat * w + b
  template <class A> HG_HD A operator()(A xhat, A w, A b) const { return xhat * w + b; }
};

Tensor cuda_group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const GroupLayout& l,
                               double eps, NormStatistics& stats) {
  const Tensor xhat = kernels::cuda::layer_norm_forward(x, Tensor(), Tensor(), l.rows(), l.D(), eps, stats.mean_t,
                                                        stats.rstd_t);
  if (!weight.defined() && !bias.defined()) return xhat;
  const Tensor w = weight.defined() ? per_channel(weight, x) : per_channel(ones({l.C}, x.options()), x);
  const Tensor b = bias.defined() ? per_channel(bias, x) : per_channel(zeros({l.C}, x.options()), x);
  return map_to_new<3>(x.shape(), {xhat, w, b}, AffineMath{});
}

NormGradients cuda_group_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight,
                                       const NormStatistics& stats, const GroupLayout& l, double eps) {
  NormGradients out;
  const Tensor gh = weight.defined() ? map_to_new<2>(x.shape(), {grad, per_channel(weight, x)}, math::Mul{}) : grad;
  Tensor unused_dw, unused_db;
  kernels::cuda::layer_norm_backward(x, gh, Tensor(), stats.mean_t, stats.rstd_t, l.rows(), l.D(), out.dx, unused_dw,
                                     unused_db);
  // dw = sum of g * xhat, db = sum of g, over everything but the channels; xhat recomputed.
  Tensor mean, rstd;
  const Tensor xhat = kernels::cuda::layer_norm_forward(x, Tensor(), Tensor(), l.rows(), l.D(), eps, mean, rstd);
  Shape dims{0};
  for (int d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor g_xhat = map_to_new<2>(x.shape(), {grad, xhat}, math::Mul{});
  const DType parameter = weight.defined() ? weight.dtype() : TensorOptions{}.dtype;
  const TensorOptions as_parameter{.dtype = parameter, .device = x.device()};
  out.dw = detail::copy_with_options(reduce(ReduceKind::Sum, plan_reduction(g_xhat, dims, "group_norm"), false), as_parameter);
  out.db = detail::copy_with_options(reduce(ReduceKind::Sum, plan_reduction(grad, dims, "group_norm"), false), as_parameter);
  return out;
}

}  // namespace

Tensor group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups, double eps,
                          NormStatistics& stats) {
  const GroupLayout l = group_layout(x, groups);
  if (x.device().is_cuda()) return cuda_group_norm_forward(x, weight, bias, l, eps, stats);
  const std::vector<double> w = weight_values(weight, l.C), b = values_or(bias, l.C, 0.0);
  stats.mean.assign(static_cast<size_t>(l.rows()), 0.0);
  stats.rstd.assign(static_cast<size_t>(l.rows()), 0.0);
  Tensor out = empty(x.shape(), x.options());
  if (x.numel() == 0) return out;
  visit_floating(x.dtype(), "group_norm", [&]<class T> {
    row_norm_forward_kernel<T>(x.data_ptr<T>(), out.data_ptr<T>(), l.rows(), l.D(), eps, l.affine(), w, b, stats.mean,
                               stats.rstd);
  });
  return out;
}

NormGradients group_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& weight, const NormStatistics& stats,
                                  int64_t groups, double eps) {
  const GroupLayout l = group_layout(x, groups);
  if (x.device().is_cuda()) return cuda_group_norm_backward(x, grad, weight, stats, l, eps);
  NormGradients out;
  const std::vector<double> w = weight_values(weight, l.C);
  out.dx = empty(x.shape(), x.options());
  std::vector<double> dw(static_cast<size_t>(l.C)), db(static_cast<size_t>(l.C));
  if (x.numel() > 0)
    visit_floating(x.dtype(), "group_norm", [&]<class T> {
      row_norm_backward_kernel<T>(x.data_ptr<T>(), grad.data_ptr<T>(), l.rows(), l.D(), l.affine(), w, stats.mean,
                                  stats.rstd, out.dx.data_ptr<T>(), dw, db);
    });
  out.dw = vector_tensor(dw, parameter_dtype(weight), x.device());
  out.db = vector_tensor(db, parameter_dtype(weight), x.device());
  return out;
}

std::vector<double> group_variances(const NormStatistics& stats, double eps) {
  std::vector<double> rstd = stats.rstd;
  if (stats.rstd_t.defined()) rstd = stats.rstd_t.to_vector<double>();
  std::vector<double> var(rstd.size());
  for (size_t k = 0; k < rstd.size(); ++k) var[k] = 1.0 / (rstd[k] * rstd[k]) - eps;
  return var;
}

}  // namespace hg::kernels
