// Winograd F(2x2, 3x3) (see winograd_conv.h), a chunk of images at a time so that the chunk's
// transformed inputs V and products M stay about L2-sized (kChunkWork):
//
//   1. input transform: every 4x4 patch d of the padded image (tiles 2 pixels apart) -> V = B^T d B,
//      stored V[xi][c][tile] for the 16 positions xi;
//   2. 16 GEMMs: M[xi] (Cout, tiles) = U[xi] (Cout, Cin) @ V[xi] (Cin, tiles), on the packed GEMM;
//   3. output transform: Y = A^T M A per tile and output channel, + bias, relu, stored as T.
//
// Both transforms run on blocks of kLanes tiles held in small fixed-size arrays, which the
// compiler turns into whole-vector loads, adds and stores; the input patches are first copied
// into 8 arrays D so that each of the 16 patch entries of consecutive tiles is a contiguous run
// (see gather_patches). Everything is f32; 16-bit data is widened a plane at a time and rounded
// once when stored. NOTE: the transforms add and subtract (B^T d B sums up to 4 entries, A^T M A
// up to 9), so the f32 rounding error is a few times im2col's, still within conv2d's tolerance
// (gemm_tolerance in tests/ops_test_helpers.h; tests/test_winograd.cpp).
#include "kernels/cpu/winograd_conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "core/visit.h"
#include "kernels/cpu/gemm.h"

namespace hg::kernels::cpu {

namespace {

constexpr int64_t kLanes = 16;      // tiles per block of the transforms (an AVX-512 vector of f32)
constexpr int64_t kPositions = 16;  // the 4 x 4 entries of a transformed tile
// Tiles x (Cin + Cout) per chunk: V and M of a chunk take 16 x 4 bytes x that = 1 MB, Zen 4's L2
// (16384 and 32768 measured ~10% faster than 4096 on ResNet's 32-channel layer, the same on its
// 16- and 64-channel ones). At least one image per chunk.
constexpr int64_t kChunkWork = 16384;
constexpr int64_t kPanelWidth = 32;  // the columns of the widest GEMM register tile (AVX-512's 12 x 32)

// One Winograd convolution: input (N, Cin, H, W) -> output (N, Cout, OH, OW), zero padding `pad`,
// OH = H + 2 pad - 2; tiles of 2 x 2 output pixels, TH rows and TW columns of them per image.
struct Plan {
  int64_t N, Cin, H, W, Cout, OH, OW, pad;
  int64_t TH, TW;
  int64_t tiles() const { return TH * TW; }           // per image
  int64_t quadrant() const { return (TH + 1) * TW; }  // one channel's entries in each D array
};

Plan make_plan(int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t Cout, int64_t OH, int64_t OW, int64_t pad) {
  return {N, Cin, H, W, Cout, OH, OW, pad, (OH + 1) / 2, (OW + 1) / 2};
}

template <class V>
void grow(V& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
}

// ---- the filter transform ------------------------------------------------------------------------

// U[xi][o][c] = (G g G^T)[xi] of the 3x3 filter g[i][j] = tap(o, c, i, j), in f64, rounded once;
// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
template <class Tap>
std::vector<float> transform_filters(int64_t Cout, int64_t Cin, const Tap& tap) {
  std::vector<float> U(size_t(kPositions * Cout * Cin));
  for (int64_t o = 0; o < Cout; ++o)
    for (int64_t c = 0; c < Cin; ++c) {
      double gg[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        const double g0 = tap(o, c, 0, j), g1 = tap(o, c, 1, j), g2 = tap(o, c, 2, j);
        gg[0][j] = g0, gg[1][j] = (g0 + g1 + g2) / 2, gg[2][j] = (g0 - g1 + g2) / 2, gg[3][j] = g2;
      }
      for (int r = 0; r < 4; ++r) {
        const double u[4] = {gg[r][0], (gg[r][0] + gg[r][1] + gg[r][2]) / 2, (gg[r][0] - gg[r][1] + gg[r][2]) / 2,
                             gg[r][2]};
        for (int s = 0; s < 4; ++s) U[size_t(((r * 4 + s) * Cout + o) * Cin + c)] = float(u[s]);
      }
    }
  return U;
}

// ---- the input transform -------------------------------------------------------------------------

// The 8 arrays D[a*4 + j] (TH + 1, TW) of one channel's plane (H, W): D[a*4 + j][y][x] =
// padded[2y + a][2x + j], the padded plane's rows of parity a, each tile's column j. Patch entry
// (i, j) of tile (ty, tx) is then D[(i%2)*4 + j][ty + i/2][tx]: for consecutive tiles, a
// contiguous run. D's 8 arrays lie one after another.
//
// On wide maps, each array's row is a strided copy out of an input row, which the compiler
// vectorises (gather_patch_rows). On narrow ones (TW < kRowGatherWidth) the 40 loops of 4 values
// of a 7x7 plane cost more than the copies: there entry e of D is plane[source[e]], one loop
// without branches per plane (gather_patches), the padding's entries reading a zero stored just
// past the plane. (An earlier form chose between the value and 0 per entry: GCC made that a
// branch, mispredicted often enough to cost 8% of a ResNet-20 step.)
constexpr int64_t kRowGatherWidth = 8;
using PatchSources = std::vector<int32_t>;  // per entry of D: its index in the plane, or H * W (the zero)

PatchSources patch_sources(const Plan& p) {
  PatchSources source(size_t(8 * p.quadrant()));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t y = 0; y <= p.TH; ++y)
        for (int64_t x = 0; x < p.TW; ++x) {
          const int64_t h = 2 * y + a - p.pad, w = 2 * x + j - p.pad, e = ((a * 4 + j) * (p.TH + 1) + y) * p.TW + x;
          const bool inside = h >= 0 && h < p.H && w >= 0 && w < p.W;
          source[size_t(e)] = int32_t(inside ? h * p.W + w : p.H * p.W);
        }
  return source;
}

void gather_patch_rows(const float* plane, const Plan& p, float* D) {
  const int64_t stride = p.quadrant();
  for (int64_t r = 0; r < 2 * p.TH + 2; ++r) {
    const int64_t h = r - p.pad, a = r % 2, offset = (r / 2) * p.TW;
    for (int64_t j = 0; j < 4; ++j) {  // dst[x] = src[2x + j - pad] where that is inside the plane, else 0
      float* dst = D + (a * 4 + j) * stride + offset;
      // (x from ceil((pad - j) / 2) to floor((W - 1 + pad - j) / 2); the numerators are >= -3, so
      // 4 is added to divide a non-negative number.)
      const bool row_inside = h >= 0 && h < p.H;
      const int64_t first = row_inside ? std::clamp<int64_t>((p.pad - j + 5) / 2 - 2, 0, p.TW) : p.TW;
      const int64_t last = std::clamp<int64_t>((p.W - 1 + p.pad - j + 4) / 2 - 2 + 1, first, p.TW);
      const int64_t column = h * p.W + j - p.pad;
      for (int64_t x = 0; x < first; ++x) dst[x] = 0.0f;
      for (int64_t x = first; x < last; ++x) dst[x] = plane[column + 2 * x];
      for (int64_t x = last; x < p.TW; ++x) dst[x] = 0.0f;
    }
  }
}

// `plane` has H * W + 1 values, the last 0.
void gather_patches(const float* plane, const PatchSources& sources, float* D) {
  const int32_t* source = sources.data();
  const int64_t n = int64_t(sources.size());
  for (int64_t e = 0; e < n; ++e) D[e] = plane[source[e]];
}

// V[xi][c][t0 + tile] = (B^T d B)[xi] for every tile of channel c gathered in D, in blocks of
// kLanes tiles (a block may write up to kLanes - 1 values past the image's tiles: V's rows have
// that slack, and the next image overwrites them). B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
void transform_patches(const float* D, int64_t stride, const Plan& p, float* V, int64_t position_stride,
                       int64_t row_pitch, int64_t c, int64_t t0) {
  for (int64_t f0 = 0; f0 < p.tiles(); f0 += kLanes) {
    float d[4][4][kLanes], r[4][4][kLanes];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        std::memcpy(d[i][j], D + ((i % 2) * 4 + j) * stride + (i / 2) * p.TW + f0, sizeof d[i][j]);
    for (int j = 0; j < 4; ++j)  // r = B^T d
      for (int64_t l = 0; l < kLanes; ++l) {
        r[0][j][l] = d[0][j][l] - d[2][j][l];
        r[1][j][l] = d[1][j][l] + d[2][j][l];
        r[2][j][l] = d[2][j][l] - d[1][j][l];
        r[3][j][l] = d[1][j][l] - d[3][j][l];
      }
    float* out = V + c * row_pitch + t0 + f0;
    for (int k = 0; k < 4; ++k) {  // V = r B
      float v[4][kLanes];
      for (int64_t l = 0; l < kLanes; ++l) {
        v[0][l] = r[k][0][l] - r[k][2][l];
        v[1][l] = r[k][1][l] + r[k][2][l];
        v[2][l] = r[k][2][l] - r[k][1][l];
        v[3][l] = r[k][1][l] - r[k][3][l];
      }
      for (int s = 0; s < 4; ++s) std::memcpy(out + (k * 4 + s) * position_stride, v[s], sizeof v[s]);
    }
  }
}

// ---- the output transform ------------------------------------------------------------------------

// Output channel o of one image: Y = A^T M A + bias per tile, relu'd (NaN kept, like relu), written
// to the (OH, OW) plane `out`. A^T = [1 1 1 0; 0 1 -1 -1]. M[xi] holds row o at o * pitch, the
// image's tiles from t0 on; Y is scratch. The room_after_plane values after the plane are the
// caller's to write later (rows may spill into them).
template <class T>
void transform_products(const float* M, int64_t position_stride, int64_t pitch, int64_t t0, const Plan& p, int64_t o,
                        float bias, bool relu, T* out, int64_t room_after_plane, std::vector<float>& Y) {
  const int64_t y_pitch = 2 * (p.tiles() + kLanes);
  grow(Y, 2 * y_pitch);
  for (int64_t f0 = 0; f0 < p.tiles(); f0 += kLanes) {
    float m[4][4][kLanes], s[4][2][kLanes];
    for (int xi = 0; xi < kPositions; ++xi)
      std::memcpy(m[xi / 4][xi % 4], M + xi * position_stride + o * pitch + t0 + f0, sizeof m[0][0]);
    for (int k = 0; k < 4; ++k)  // s = M A
      for (int64_t l = 0; l < kLanes; ++l) {
        s[k][0][l] = m[k][0][l] + m[k][1][l] + m[k][2][l];
        s[k][1][l] = m[k][1][l] - m[k][2][l] - m[k][3][l];
      }
    float y[2][2][kLanes];  // y[a][b]: output pixel (a, b) of each tile
    for (int b = 0; b < 2; ++b)  // y = A^T s
      for (int64_t l = 0; l < kLanes; ++l) {
        y[0][b][l] = bias + s[0][b][l] + s[1][b][l] + s[2][b][l];
        y[1][b][l] = bias + s[1][b][l] - s[2][b][l] - s[3][b][l];
      }
    // (relu in a loop of its own: inside the interleaving loop below it kept GCC from vectorising
    // either, and the pairs went out one scalar at a time.)
    if (relu)
      for (auto& row : y)
        for (auto& pixels : row)
          for (float& v : pixels) v = v < 0.0f ? 0.0f : v;  // (NaN kept, like relu)
    for (int a = 0; a < 2; ++a) {  // Y[a][2 tile + b] = y[a][b]: output row 2 ty + a of tile row ty is a run
      float* pairs = Y.data() + a * y_pitch + 2 * f0;
      for (int64_t l = 0; l < kLanes; ++l) {
        pairs[2 * l] = y[a][0][l];
        pairs[2 * l + 1] = y[a][1][l];
      }
    }
  }
  for (int64_t ty = 0; ty < p.TH; ++ty)  // tile rows -> output rows 2 ty, 2 ty + 1 (the last may be cut)
    for (int64_t a = 0; a < 2 && 2 * ty + a < p.OH; ++a) {
      const float* src = Y.data() + a * y_pitch + 2 * ty * p.TW;
      const int64_t oh = 2 * ty + a;
      T* row = out + oh * p.OW;
      if constexpr (std::is_same_v<T, float>) {
        // In whole blocks (a call to memmove per 7-value row cost more than the row), spilling
        // into the rows after it, which are written later -- where there is room for that.
        const int64_t room = (p.OH - 1 - oh) * p.OW + room_after_plane;
        if (room < kLanes) {
          std::copy_n(src, p.OW, row);
        } else {
          for (int64_t x = 0; x < p.OW; x += kLanes) std::memcpy(row + x, src + x, kLanes * sizeof(float));
        }
      } else {
        convert_from_float(src, row, size_t(p.OW));
      }
    }
}

// ---- the driver ------------------------------------------------------------------------------------

// M[xi] (Cout, T) = U[xi] (Cout, Cin) @ V[xi] (Cin, T), rows of V `row_pitch` apart.
void multiply(const Plan& p, const std::vector<float>& U, const float* V, int64_t row_pitch, int64_t T, float* M) {
  for (int64_t xi = 0; xi < kPositions; ++xi) {
    const MatrixView a{U.data() + xi * p.Cout * p.Cin, p.Cout, p.Cin, p.Cin, 1};
    const MatrixView b{V + xi * p.Cin * row_pitch, p.Cin, T, row_pitch, 1};
    float* c = M + xi * p.Cout * T;
    if (has_packed_gemm()) packed_gemm<float>(a, b, c, T, false);
    else gemm_dense<float>(a, b, c, false);
  }
}

// Images per chunk: as many as kChunkWork allows, or fewer where that fills the GEMM's column
// panels (kPanelWidth tiles) better -- 14x14 maps have 49 tiles, and 2 images (98 tiles) would pad
// to 128 columns where 5 (245) pad to 256.
int64_t images_per_chunk(const Plan& p) {
  const int64_t most = std::clamp<int64_t>(kChunkWork / ((p.Cin + p.Cout) * p.tiles()), 1, p.N);
  int64_t best = most;
  double best_fill = 0;
  for (int64_t n = most; n >= (most + 1) / 2; --n) {
    const int64_t tiles = n * p.tiles();
    const double fill = double(tiles) / double((tiles + kPanelWidth - 1) / kPanelWidth * kPanelWidth);
    if (fill > best_fill + 0.01) best = n, best_fill = fill;
  }
  return best;
}

template <class T>
void run(const Plan& p, const T* input, const std::vector<float>& U, const std::vector<float>& bias, bool relu,
         T* output) {
  const int64_t per_image = p.tiles(), images = images_per_chunk(p);
  const int64_t chunks = (p.N + images - 1) / images;
  const int64_t d_stride = p.quadrant();  // (the last array's reads run up to a row and a block past)
  const bool by_rows = p.TW >= kRowGatherWidth;
  const PatchSources sources = by_rows ? PatchSources{} : patch_sources(p);
  const auto gather = [&](const float* plane, float* D) {
    if (by_rows) gather_patch_rows(plane, p, D);
    else gather_patches(plane, sources, D);
  };
  // The plane as f32 for the gather: itself where it is f32 and read by rows; else copied into
  // `line` (16-bit data widened once per plane) with the zero gather_patches reads after it.
  const auto f32_plane = [&](const T* plane, std::vector<float>& line) -> const float* {
    if constexpr (std::is_same_v<T, float>) {
      if (by_rows) return plane;
    }
    grow(line, p.H * p.W + 1);
    if constexpr (std::is_same_v<T, float>) std::copy_n(plane, p.H * p.W, line.data());
    else convert_to_float(plane, line.data(), size_t(p.H * p.W));
    line[size_t(p.H * p.W)] = 0.0f;
    return line.data();
  };
  parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> V, M, D, Y, line;
    for (int64_t chunk = lo; chunk < hi; ++chunk) {
      const int64_t n0 = chunk * images, n1 = std::min(p.N, n0 + images), chunk_tiles = (n1 - n0) * per_image;
      const int64_t row_pitch = chunk_tiles + kLanes;
      grow(V, kPositions * p.Cin * row_pitch);
      grow(M, kPositions * p.Cout * chunk_tiles + kLanes);
      grow(D, 8 * d_stride + p.TW + kLanes);
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t c = 0; c < p.Cin; ++c) {
          gather(f32_plane(input + (n * p.Cin + c) * p.H * p.W, line), D.data());
          transform_patches(D.data(), d_stride, p, V.data(), p.Cin * row_pitch, row_pitch, c, (n - n0) * per_image);
        }
      multiply(p, U, V.data(), row_pitch, chunk_tiles, M.data());
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t o = 0; o < p.Cout; ++o)
          transform_products(M.data(), p.Cout * chunk_tiles, chunk_tiles, (n - n0) * per_image, p, o, bias[size_t(o)], relu,
                             output + (n * p.Cout + o) * p.OH * p.OW,
                             ((n1 - n) * p.Cout - o - 1) * p.OH * p.OW, Y);
    }
  });
}

}  // namespace

bool winograd_applies(const ConvGeometry& g, DType dtype) {
  return (dtype == f32 || dtype == f16 || dtype == bf16) && g.kh == 3 && g.kw == 3 && g.stride == 1 &&
         g.dilation == 1 && g.groups == 1 && g.pad >= 0 && g.pad <= 2 && g.C > 0 && g.O > 0 && g.OH > 0 && g.OW > 0;
}

void winograd_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out, const ConvGeometry& g,
                     bool relu) {
  HG_CHECK(winograd_applies(g, x.dtype()), "winograd_conv2d: not a 3x3 stride-1 convolution of f32 or 16-bit data");
  const std::vector<float> bias = bias_values<float>(b, g.O);
  visit_floating(x.dtype(), "conv2d", [&]<class T> {
    if constexpr (!std::is_same_v<T, double>) {
      const T* weight = w.data_ptr<T>();  // (O, C, 3, 3)
      const std::vector<float> U = transform_filters(g.O, g.C, [&](int64_t o, int64_t c, int i, int j) {
        return double(Acc<T>(weight[((o * g.C + c) * 3 + i) * 3 + j]));
      });
      run<T>(make_plan(g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.pad), x.data_ptr<T>(), U, bias, relu, out.data_ptr<T>());
    }
  });
}

void winograd_conv2d_input_grad(const Tensor& w, const Tensor& dy, const ConvGeometry& g, const Tensor& dx) {
  HG_CHECK(winograd_applies(g, dy.dtype()), "winograd_conv2d_input_grad: not a 3x3 stride-1 convolution of f32 or 16-bit data");
  visit_floating(dy.dtype(), "conv2d", [&]<class T> {
    if constexpr (!std::is_same_v<T, double>) {
      // dx[c] = sum over o of dy[o] correlated with w[o][c] rotated by 180 degrees, padding 2 - pad.
      const T* weight = w.data_ptr<T>();
      const std::vector<float> U = transform_filters(g.C, g.O, [&](int64_t c, int64_t o, int i, int j) {
        return double(Acc<T>(weight[((o * g.C + c) * 3 + (2 - i)) * 3 + (2 - j)]));
      });
      const std::vector<float> no_bias(size_t(g.C), 0.0f);
      run<T>(make_plan(g.N, g.O, g.OH, g.OW, g.C, g.H, g.W, 2 - g.pad), dy.data_ptr<T>(), U, no_bias, false,
             dx.data_ptr<T>());
    }
  });
}

}  // namespace hg::kernels::cpu
