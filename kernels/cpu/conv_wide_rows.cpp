// The direct convolution on wide rows (kernels/cpu/conv_wide_rows.h): per part of a few images,
// the input laid out as one padded plane per channel, the register-blocked kernel of the CPU
// level (conv_wide_rows_direct.inc) into a wide result, and each image's valid columns copied
// out. Parts run in parallel; each output value is one block's sum, whatever the thread count.
#include "kernels/cpu/conv_wide_rows.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/simd_target.h"
#include "kernels/cpu/wide_rows.h"

#if HG_X86
#include <immintrin.h>
#endif

namespace hg::kernels::cpu {

namespace {

// Output positions per part: as many images as fill about this many (2 of 28x28, 9 of 14x14, at
// most 32 of 7x7; images_per_part), so that one part's result rows and plane stay in L2.
constexpr int64_t kPartColumns = 2048;
// The widest block of positions (AVX-512: 6 vectors of 16, a multiple of every block's width);
// result rows are padded to it.
constexpr int64_t kWidestBlock = 96;

struct DirectProblem {
  const float* plane;
  const int64_t* offsets;  // per tap: where its run starts in the plane
  int64_t taps;
  const float* packed_weights;  // [row block][tap][kRows], rows past the last zero
  const float* bias;            // per row
  int64_t rows;                 // output channels
  int64_t columns, pitch;       // positions computed (a multiple of the block), result row pitch
  bool relu;
};

struct DirectKernel {
  int64_t rows;  // output channels per block (the packed weights' grouping)
  void (*run)(const DirectProblem& p, float* result);
};

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace avx512 {
#include "kernels/cpu/wide_rows_avx512.inc"
#include "kernels/cpu/conv_wide_rows_direct.inc"
}  // namespace avx512
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace avx2 {
#include "kernels/cpu/wide_rows_avx2.inc"
#include "kernels/cpu/conv_wide_rows_direct.inc"
}  // namespace avx2
HG_TARGET_END
#endif

// The level's kernel for O output channels, or none (generic and aarch64).
//  - AVX-512, O a multiple of 8: 8 channels x 3 vectors, 24 sums; per tap 3 loads of the plane
//    and 8 broadcasts: half the plane loads of 4 x 6 per FMA. On Sapphire Rapids the kernel alone
//    ran 15-20% faster on 16-64 channels (64 x 7x7 x 32 images: 0.83 -> 0.69 ms), ResNet-20's
//    3x3 stride-1 forwards and input gradients 13-15%; rows past O would be wasted work where O is
//    not a multiple of 8, so those keep 4 x 6.
//  - AVX-512 otherwise: 4 channels x 6 vectors (24 sums, 6 loads and 4 broadcasts per tap).
//  - AVX2: 4 channels x 3 vectors, 12 sums, 3 loads and 4 broadcasts per tap, in 16 registers.
const DirectKernel* direct_kernel(int64_t O) {
#if HG_X86
  static constexpr DirectKernel k512_eight{8, avx512::direct_blocks<8, 3>};
  static constexpr DirectKernel k512_four{4, avx512::direct_blocks<4, 6>};
  static constexpr DirectKernel k256{4, avx2::direct_blocks<4, 3>};
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return O % 8 == 0 ? &k512_eight : &k512_four;
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return &k256;
#endif
  (void)O;
  return nullptr;
}

template <class V>
void grow(V& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
}

}  // namespace

bool wide_rows_apply(const ConvGeometry& g) {
  return wide_layout_serves(g) && direct_kernel(g.O) != nullptr;
}

template <class T>
void conv2d_wide_rows(const T* x, const T* w, const float* bias, T* out, const ConvGeometry& g, bool relu) {
  const DirectKernel* kernel = direct_kernel(g.O);
  HG_CHECK(kernel != nullptr && wide_rows_apply(g),
           "internal error: the wide-rows convolution for a convolution or CPU level it does not serve");
  const int64_t taps = g.ckk();
  const int64_t per_part = images_per_part(g, kPartColumns);
  const int64_t parts = (g.N + per_part - 1) / per_part;
  // The weights as [row block][tap][kRows] f32, rows past O zero.
  const int64_t row_blocks = (g.O + kernel->rows - 1) / kernel->rows;
  std::vector<float> packed(size_t(row_blocks * taps * kernel->rows), 0.0f);
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < taps; ++t)
      packed[size_t(((o / kernel->rows) * taps + t) * kernel->rows + o % kernel->rows)] = float(Acc<T>(w[o * taps + t]));
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    thread_local ZeroedScratch<float> plane;
    thread_local std::vector<float> result;
    thread_local std::vector<int64_t> offsets;
    for (int64_t part = lo; part < hi; ++part) {
      const int64_t n0 = part * per_part;
      const WidePlane p = wide_plane(g, std::min(g.N, n0 + per_part) - n0);
      const int64_t columns = p.positions(g), blocked = (columns + kWidestBlock - 1) / kWidestBlock * kWidestBlock;
      // The plane, then what the last blocks read past it (dropped positions): zeros.
      const int64_t size = p.floats(g) + g.dilation * (g.kw - 1) + (blocked - columns) + kWidestBlock;
      float* values = plane.prepare(size, {g.C, g.H, g.W, g.pad, g.stride, p.images, size});
      lay_out_images(x, g, n0, p, values);
      tap_offsets(g, p, offsets);
      grow(result, g.O * blocked);
      kernel->run({values, offsets.data(), taps, packed.data(), bias, g.O, blocked, blocked, relu}, result.data());
      // Each image's valid columns.
      for (int64_t b = 0; b < p.images; ++b)
        for (int64_t o = 0; o < g.O; ++o) {
          const float* src = result.data() + o * blocked + b * p.slot;
          T* dst = out + ((n0 + b) * g.O + o) * g.ohw();
          if constexpr (std::is_same_v<T, float>) {
            copy_rows(src, p.Wp, dst, g.OW, g.OH, g.OW);
          } else {
            for (int64_t oh = 0; oh < g.OH; ++oh) convert_from_float(src + oh * p.Wp, dst + oh * g.OW, size_t(g.OW));
          }
        }
    }
  });
}

template void conv2d_wide_rows<float>(const float*, const float*, const float*, float*, const ConvGeometry&, bool);
template void conv2d_wide_rows<half>(const half*, const half*, const float*, half*, const ConvGeometry&, bool);
template void conv2d_wide_rows<bfloat16>(const bfloat16*, const bfloat16*, const float*, bfloat16*, const ConvGeometry&, bool);

}  // namespace hg::kernels::cpu
