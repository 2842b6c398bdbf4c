// The Winograd F(2x2, 3x3) convolution (kernels/cpu/winograd_conv.h) against the naive f64
// reference and against im2col + GEMM, at every CPU level this machine has: forward with and
// without bias and relu, the input gradient (with the relu epilogue's mask), 16-bit data, and the
// shapes where tiles are cut (odd sizes, 1x1 maps), where blocks of 16 tiles are partial, and
// where channel counts are not multiples of the vector width or the GEMM's register tiles.
#include "kernels/cpu/winograd_conv.h"

#include "core/cpu_features.h"
#include "kernels/cpu/conv_wide_columns.h"
#include "kernels/cpu/wide_rows.h"
#include "ops_test_helpers.h"

using hg::cpu::Isa;
using hg::kernels::ConvGeometry;
using hg::kernels::cpu::ConvAlgorithm;

namespace {

// The CPU levels this machine has, up to the one in use; each test sets them in turn with a
// LevelCap, which restores the level in use when it goes (an exception included).
std::vector<Isa> levels_available() {
  std::vector<Isa> levels;
  for (Isa level : {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx, Isa::Neon, Isa::NeonBf16})
    if (hg::cpu::level_includes(hg::cpu::isa(), level)) levels.push_back(level);
  return levels;
}

struct LevelCap {
  explicit LevelCap(Isa level) : previous(hg::cpu::set_isa(level)) {}
  ~LevelCap() { hg::cpu::set_isa(previous); }
  Isa previous;
};

// body() at each of those levels, the level's name in the failure messages.
template <class Body>
void at_each_level(const Body& body) {
  for (Isa level : levels_available()) {
    const LevelCap cap(level);
    const std::string name = hg::cpu::isa_name(level);
    CAPTURE(name);
    body();
  }
}

// A stride-1 convolution of the tests below: its geometry, and its name for failure messages.
struct StrideOneCase {
  int64_t N, C, O, H, W, k, pad, dilation;
  ConvGeometry geometry() const {
    const int64_t OH = H + 2 * pad - (k - 1) * dilation, OW = W + 2 * pad - (k - 1) * dilation;
    ConvGeometry g{N, C, H, W, O, k, k, 1, pad, OH, OW};
    g.dilation = dilation;
    return g;
  }
  std::string name() const {
    return std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(H) + "x" + std::to_string(W) + " -> " +
           std::to_string(O) + ", k " + std::to_string(k) + ", pad " + std::to_string(pad) + ", dilation " +
           std::to_string(dilation);
  }
};

// body(c, its geometry) for each case, the case named in failure messages.
template <class Body>
void for_each_case(std::initializer_list<StrideOneCase> cases, const Body& body) {
  for (const StrideOneCase& c : cases) {
    const std::string shape = c.name();
    CAPTURE(shape);
    body(c, c.geometry());
  }
}

struct Shape {
  int64_t N, C, O, H, W, pad;
};

// 1x1 and 2x2 maps (one cut tile), odd sizes (cut last tile row and column), 14x14 (49 tiles: a
// partial block of 16), 7x7 (16 tiles: several images per GEMM), channel counts around 16, 32,
// 64 and the 12-row GEMM tile, padding 0 and 2, a map wider than tall.
const Shape kShapes[] = {{1, 1, 1, 1, 1, 1},   {2, 3, 5, 2, 2, 1},    {2, 3, 5, 7, 9, 1},    {1, 17, 13, 13, 11, 1},
                         {3, 16, 16, 14, 14, 1}, {2, 33, 31, 14, 14, 1}, {5, 64, 64, 7, 7, 1}, {1, 5, 3, 6, 5, 0},
                         {2, 4, 6, 3, 4, 2},   {1, 2, 3, 5, 37, 1},   {1, 12, 25, 28, 28, 1}};

std::string describe(const Shape& s) {
  return std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" + std::to_string(s.W) + " -> " +
         std::to_string(s.O) + ", pad " + std::to_string(s.pad);
}

ConvGeometry geometry(const Shape& s) {
  const int64_t OH = s.H + 2 * s.pad - 2, OW = s.W + 2 * s.pad - 2;
  return {s.N, s.C, s.H, s.W, s.O, 3, 3, 1, s.pad, OH, OW};
}

// conv2d's tolerance against the f64 truth (gemm_tolerance, K = C * 9 products per output). NOTE:
// Winograd's transforms add and subtract up to 9 rounded terms on each side of the GEMM, so its
// error is a few times im2col's; the tests hold it to the same documented conv2d tolerance.
Tolerance conv_tolerance(int64_t channels) { return gemm_tolerance(channels * 9); }

// The input gradient the obvious way: dx[n][c][h][w] = sum over o, i, j of dy[n][o][h + pad - i][w + pad - j] * w[o][c][i][j].
ref::Array input_grad(const ref::Array& dy, const ref::Array& w, const ConvGeometry& g) {
  ref::Array dx{{g.N, g.C, g.H, g.W}, std::vector<double>(size_t(g.N * g.C * g.H * g.W), 0.0)};
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t x = 0; x < g.W; ++x) {
          double total = 0;
          for (int64_t o = 0; o < g.O; ++o)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t oh = h + g.pad - i, ow = x + g.pad - j;
                if (oh < 0 || oh >= g.OH || ow < 0 || ow >= g.OW) continue;
                total += dy.v[size_t(((n * g.O + o) * g.OH + oh) * g.OW + ow)] * w.v[size_t(((o * g.C + c) * 3 + i) * 3 + j)];
              }
          dx.v[size_t(((n * g.C + c) * g.H + h) * g.W + x)] = total;
        }
  return dx;
}

}  // namespace

TEST_CASE("winograd.forward_matches_the_reference_and_im2col") {
  hg::manual_seed(11);
  for (const Shape& s : kShapes) {
    const std::string shape = describe(s);
    CAPTURE(shape);
    const ConvGeometry g = geometry(s);
    const Tensor x = normal({s.N, s.C, s.H, s.W}), w = normal({s.O, s.C, 3, 3}), b = normal({s.O});
    for (bool with_bias : {false, true}) {
      const Tensor bias = with_bias ? b : Tensor();
      const ref::Array truth = ref::conv2d(ref::of(x), ref::of(w), with_bias ? b.to_vector<double>() : std::vector<double>(), 1, s.pad);
      for (bool relu : {false, true}) {
        CAPTURE(with_bias);
        CAPTURE(relu);
        const Tensor expected = relu ? hg::relu(ref::tensor(truth)) : ref::tensor(truth);
        for (Isa level : levels_available()) {
          const LevelCap cap(level);
          const std::string name = hg::cpu::isa_name(level);
          CAPTURE(name);
          const Tensor winograd = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Winograd, x, w, bias, g, relu);
          const Tensor im2col = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, bias, g, relu);
          CHECK_CLOSE_WITH(winograd.to(hg::f64), expected, conv_tolerance(s.C));
          CHECK_CLOSE_WITH(winograd, im2col, conv_tolerance(s.C));
        }
      }
    }
  }
}

TEST_CASE("winograd.input_grad_matches_the_reference_and_im2col") {
  hg::manual_seed(12);
  for (const Shape& s : kShapes) {
    const std::string shape = describe(s);
    CAPTURE(shape);
    const ConvGeometry g = geometry(s);
    const Tensor x = normal({s.N, s.C, s.H, s.W}), w = normal({s.O, s.C, 3, 3}), dy = normal({s.N, s.O, g.OH, g.OW});
    const Tensor truth = ref::tensor(input_grad(ref::of(dy), ref::of(w), g));
    // With the relu epilogue, the gradient passes where the forward's output y is positive.
    const Tensor y = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, true);
    const Tensor masked_truth = ref::tensor(input_grad(ref::of(dy * hg::gt(y, hg::zeros_like(y))), ref::of(w), g));
    for (Isa level : levels_available()) {
      const LevelCap cap(level);
      const std::string name = hg::cpu::isa_name(level);
      CAPTURE(name);
      for (bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor y_or_none = relu ? y : Tensor();
        const auto winograd = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Winograd, x, w, dy, y_or_none, g, true, true, true);
        const auto im2col = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, y_or_none, g, true, true, true);
        CHECK_CLOSE_WITH(winograd.x.to(hg::f64), relu ? masked_truth : truth, conv_tolerance(s.O));
        CHECK_CLOSE_WITH(winograd.x, im2col.x, conv_tolerance(s.O));
        // The weight's and bias's gradients stay on im2col + GEMM, whichever computes the input's.
        CHECK_CLOSE_WITH(winograd.w, im2col.w, kExact);
        CHECK_CLOSE_WITH(winograd.b, im2col.b, kExact);
      }
    }
  }
}

// The input gradient as the convolution of dy with the flipped weight (ConvAlgorithm::Im2colFlipped,
// kernels/conv.cpp): stride 1, any kernel size, padding up to (k - 1) * dilation, dilation.
TEST_CASE("conv.flipped_input_grad_matches_the_reference_and_im2col") {
  hg::manual_seed(15);
  for_each_case({{2, 16, 16, 14, 14, 3, 1, 1}, {1, 5, 13, 7, 9, 3, 1, 1}, {2, 17, 3, 6, 5, 3, 0, 1},
                 {1, 4, 6, 5, 4, 3, 2, 1},     {1, 3, 4, 9, 8, 5, 2, 1},  {2, 6, 5, 4, 3, 1, 0, 1},
                 {1, 4, 3, 9, 10, 3, 2, 2},    {1, 33, 40, 1, 1, 3, 1, 1}}, [&](const StrideOneCase& k, const ConvGeometry& g) {
    const int64_t OH = g.OH, OW = g.OW;
    const Tensor x = normal({k.N, k.C, k.H, k.W}), w = normal({k.O, k.C, k.k, k.k}), dy = normal({k.N, k.O, OH, OW});
    const Tensor y = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, true);
    at_each_level([&] {
      for (bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor y_or_none = relu ? y : Tensor();
        const Tensor masked = relu ? dy * hg::gt(y, hg::zeros_like(y)) : dy;
        // The f64 truth: the GEMM + col2im path in f64 (gradcheck's), from the masked gradient.
        const Tensor truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                    masked.to(hg::f64), Tensor(), g, true, false, false).x;
        const auto flipped = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2colFlipped, x, w, dy, y_or_none, g, true, true, true);
        const auto im2col = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, y_or_none, g, true, true, true);
        CHECK_CLOSE_WITH(flipped.x.to(hg::f64), truth, conv_tolerance(k.O * k.k * k.k / 9 + 1));
        CHECK_CLOSE_WITH(flipped.x, im2col.x, conv_tolerance(k.O * k.k * k.k / 9 + 1));
        CHECK_CLOSE_WITH(flipped.w, im2col.w, kExact);  // (the weight's and bias's gradients: the same path)
        CHECK_CLOSE_WITH(flipped.b, im2col.b, kExact);
        // bf16 (and f16): products of the 16-bit values, f32 sums, rounded once (scenario 3).
        for (hg::DType dtype : {hg::bf16, hg::f16}) {
          CAPTURE(dtype);
          const Tensor x16 = x.to(dtype), w16 = w.to(dtype), dy16 = dy.to(dtype), y16 = y.to(dtype);
          const Tensor x32 = x16.to(hg::f32), w32 = w16.to(hg::f32), dy32 = dy16.to(hg::f32), y32 = y16.to(hg::f32);
          const Tensor masked32 = relu ? dy32 * hg::gt(y32, hg::zeros_like(y32)) : dy32;
          const Tensor truth16 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x32.to(hg::f64), w32.to(hg::f64),
                                                                        masked32.to(hg::f64), Tensor(), g, true, false, false).x;
          const Tensor low = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2colFlipped, x16, w16, dy16,
                                                                    relu ? y16 : Tensor(), g, true, false, false).x;
          const Tensor ref32 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x32, w32, dy32,
                                                                      relu ? y32 : Tensor(), g, true, false, false).x;
          CHECK(low.dtype() == dtype);
          CHECK_LOW_PRECISION(low, ref32, truth16);
        }
      }
    });
  });
  const ConvGeometry strided{1, 4, 8, 8, 4, 3, 3, 2, 1, 4, 4};
  const Tensor x = normal({1, 4, 8, 8}), w = normal({4, 4, 3, 3}), dy = normal({1, 4, 4, 4});
  CHECK_THROWS_HG(hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2colFlipped, x, w, dy, Tensor(), strided, true, false, false),
                  "flipped-convolution input gradient asked for a strided or grouped convolution");
}

// Small maps put several images side by side in one GEMM (the forward's columns, the weight
// gradient's depth; kernels/conv.cpp's kBatchPixels): batches that end inside and at the end of a
// partial sum's 8 images, groups, relu, strides -- against the naive f64 reference.
TEST_CASE("conv.batched_small_maps_match_the_reference") {
  hg::manual_seed(16);
  struct Case {
    int64_t N, C, O, H, k, stride, pad, groups;
  };
  const Case cases[] = {{13, 6, 5, 7, 3, 1, 1, 1}, {11, 4, 6, 10, 3, 1, 1, 2}, {9, 3, 4, 9, 3, 2, 1, 1}, {10, 5, 3, 4, 1, 1, 0, 1}};
  for (const Case& k : cases) {
    const int64_t OH = (k.H + 2 * k.pad - k.k) / k.stride + 1;
    ConvGeometry g{k.N, k.C, k.H, k.H, k.O, k.k, k.k, k.stride, k.pad, OH, OH};
    g.groups = k.groups;
    const std::string shape = std::to_string(k.N) + "x" + std::to_string(k.C) + "x" + std::to_string(k.H) + " -> " +
                              std::to_string(k.O) + ", k " + std::to_string(k.k) + ", stride " + std::to_string(k.stride) +
                              ", groups " + std::to_string(k.groups);
    CAPTURE(shape);
    const Tensor x = normal({k.N, k.C, k.H, k.H}), w = normal({k.O, k.C / k.groups, k.k, k.k}), b = normal({k.O});
    const Tensor dy = normal({k.N, k.O, OH, OH});
    const ref::Array forward = ref::conv2d(ref::of(x), ref::of(w), b.to_vector<double>(), k.stride, k.pad, 1, k.groups);
    // dW[o][c][i][j] = sum over n, oh, ow of dy[n][o][oh][ow] * x[n][group's c][oh*stride - pad + i][ow*stride - pad + j].
    const int64_t Cg = k.C / k.groups, Og = k.O / k.groups;
    const std::vector<double> xv = x.to_vector<double>(), dyv = dy.to_vector<double>();
    std::vector<double> dw(size_t(k.O * Cg * k.k * k.k), 0.0), db(size_t(k.O), 0.0);
    for (int64_t n = 0; n < k.N; ++n)
      for (int64_t o = 0; o < k.O; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OH; ++ow) {
            const double d = dyv[size_t(((n * k.O + o) * OH + oh) * OH + ow)];
            db[size_t(o)] += d;
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t i = 0; i < k.k; ++i)
                for (int64_t j = 0; j < k.k; ++j) {
                  const int64_t h = oh * k.stride - k.pad + i, x_ = ow * k.stride - k.pad + j;
                  if (h < 0 || h >= k.H || x_ < 0 || x_ >= k.H) continue;
                  dw[size_t(((o * Cg + c) * k.k + i) * k.k + j)] +=
                      d * xv[size_t(((n * k.C + (o / Og) * Cg + c) * k.H + h) * k.H + x_)];
                }
          }
    const Tensor dw_truth = ref::tensor(ref::Array{{k.O, Cg, k.k, k.k}, dw}), db_truth = ref::tensor(ref::Array{{k.O}, db});
    at_each_level([&] {
      const Tensor out = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, b, g, false);
      CHECK_CLOSE_WITH(out.to(hg::f64), ref::tensor(forward), conv_tolerance(Cg * k.k * k.k / 9 + 1));
      const Tensor relu_out = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, b, g, true);
      CHECK_CLOSE_WITH(relu_out.to(hg::f64), hg::relu(ref::tensor(forward)), conv_tolerance(Cg * k.k * k.k / 9 + 1));
      const auto grads = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, Tensor(), g, false, true, true);
      CHECK_CLOSE_WITH(grads.w.to(hg::f64), dw_truth, gemm_tolerance(k.N * OH * OH));
      CHECK_CLOSE_WITH(grads.b.to(hg::f64), db_truth, gemm_tolerance(k.N * OH * OH));
      // bf16 (bf16 panels where the CPU has them): scenario 3 against the f32 result.
      const Tensor x16 = x.to(hg::bf16), w16 = w.to(hg::bf16), b16 = b.to(hg::bf16), dy16 = dy.to(hg::bf16);
      const Tensor x32 = x16.to(hg::f32), w32 = w16.to(hg::f32), b32 = b16.to(hg::f32), dy32 = dy16.to(hg::f32);
      const Tensor out16 = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x16, w16, b16, g, false);
      const Tensor out32 = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x32, w32, b32, g, false);
      CHECK_LOW_PRECISION(out16, out32, hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x32.to(hg::f64), w32.to(hg::f64), b32.to(hg::f64), g, false));
      const Tensor dw16 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x16, w16, dy16, Tensor(), g, false, true, false).w;
      const Tensor dw32 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x32, w32, dy32, Tensor(), g, false, true, false).w;
      const Tensor dw64 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x32.to(hg::f64), w32.to(hg::f64),
                                                                 dy32.to(hg::f64), Tensor(), g, false, true, false).w;
      CHECK_LOW_PRECISION(dw16, dw32, dw64);
    });
  }
}

TEST_CASE("winograd.sixteen_bit_data_is_computed_in_f32_and_rounded_once") {
  hg::manual_seed(13);
  const Shape s{2, 20, 24, 9, 10, 1};
  const ConvGeometry g = geometry(s);
  const Tensor x = normal({s.N, s.C, s.H, s.W}), w = normal({s.O, s.C, 3, 3}), b = normal({s.O});
  const Tensor dy = normal({s.N, s.O, g.OH, g.OW});
  for (hg::DType dtype : {hg::f16, hg::bf16}) {
    CAPTURE(dtype);
    // All three from the same 16-bit-rounded inputs (scenario 3).
    const Tensor x16 = x.to(dtype), w16 = w.to(dtype), b16 = b.to(dtype), dy16 = dy.to(dtype);
    const Tensor x32 = x16.to(hg::f32), w32 = w16.to(hg::f32), b32 = b16.to(hg::f32), dy32 = dy16.to(hg::f32);
    const Tensor truth = ref::tensor(ref::conv2d(ref::of(x32), ref::of(w32), b32.to_vector<double>(), 1, s.pad));
    const Tensor grad_truth = ref::tensor(input_grad(ref::of(dy32), ref::of(w32), g));
    for (Isa level : levels_available()) {
      const LevelCap cap(level);
      const std::string name = hg::cpu::isa_name(level);
      CAPTURE(name);
      const Tensor out = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Winograd, x16, w16, b16, g, false);
      CHECK(out.dtype() == dtype);
      CHECK_LOW_PRECISION(out, hg::kernels::cpu::conv2d_with(ConvAlgorithm::Winograd, x32, w32, b32, g, false), truth);
      const auto grads = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Winograd, x16, w16, dy16, Tensor(), g, true, false, false);
      const auto grads32 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Winograd, x32, w32, dy32, Tensor(), g, true, false, false);
      CHECK(grads.x.dtype() == dtype);
      CHECK_LOW_PRECISION(grads.x, grads32.x, grad_truth);
    }
  }
}

TEST_CASE("winograd.nan_stays_in_the_outputs_that_read_it") {
  // A NaN input pixel reaches, through B^T d B and A^T M A, exactly the outputs whose 3x3 window
  // covers it, as with im2col: no other output of its tiles turns NaN.
  const Shape s{1, 2, 3, 6, 6, 1};
  const ConvGeometry g = geometry(s);
  hg::manual_seed(14);
  Tensor x = normal({s.N, s.C, s.H, s.W});
  x.data_ptr<float>()[1 * 36 + 2 * 6 + 3] = float(kNaN);  // channel 1, row 2, column 3
  const Tensor w = normal({s.O, s.C, 3, 3});
  const Tensor winograd = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Winograd, x, w, Tensor(), g, false);
  const Tensor im2col = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, false);
  const auto report = hg_test::compare(winograd, im2col, conv_tolerance(s.C), /*equal_nan=*/true);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
}

TEST_CASE("winograd.only_3x3_stride_1_single_group_convolutions") {
  const ConvGeometry strided{1, 4, 8, 8, 4, 3, 3, 2, 1, 4, 4};
  const ConvGeometry five{1, 4, 8, 8, 4, 5, 5, 1, 2, 8, 8};
  ConvGeometry grouped{1, 4, 8, 8, 4, 3, 3, 1, 1, 8, 8};
  grouped.groups = 2;
  for (const ConvGeometry& g : {strided, five, grouped}) CHECK_FALSE(hg::kernels::cpu::winograd_applies(g, hg::f32));
  const ConvGeometry plain{1, 4, 8, 8, 4, 3, 3, 1, 1, 8, 8};
  CHECK(hg::kernels::cpu::winograd_applies(plain, hg::f32));
  CHECK_FALSE(hg::kernels::cpu::winograd_applies(plain, hg::f64));  // f64 stays on im2col (gradcheck)
  const Tensor x = normal({1, 4, 8, 8}), w = normal({4, 4, 3, 3});
  CHECK_THROWS_HG(hg::kernels::cpu::conv2d_with(ConvAlgorithm::Winograd, x, w, Tensor(), strided, false),
                  "Winograd asked for a convolution it cannot compute");
}

// The stride-1 GEMMs on wide columns (ConvAlgorithm::WideColumns, kernels/conv.cpp): images side
// by side in one padded plane, read through row offsets instead of im2col's copies. Every output
// sees the same products in the same order, so the forward and the flipped input gradient are
// bitwise im2col's -- over batches that fill the side-by-side planes or not (N not a multiple of
// the images per plane), maps of 28x28 down to 1x1, padding 0 to (k - 1) * dilation, 5x5 and
// dilated kernels, bias and relu. Only where the CPU multiplies bf16 natively; elsewhere asking
// for them is an error.
TEST_CASE("conv.wide_columns_are_bitwise_im2col") {
  hg::manual_seed(16);
  for_each_case({{3, 16, 16, 28, 28, 3, 1, 1}, {11, 32, 32, 7, 7, 3, 1, 1}, {5, 8, 24, 14, 14, 3, 1, 1},
                 {4, 5, 13, 7, 9, 3, 0, 1},    {3, 3, 4, 9, 8, 5, 2, 1},    {9, 4, 3, 9, 10, 3, 2, 2},
                 {10, 33, 17, 1, 1, 3, 1, 1},  {2, 7, 6, 5, 6, 3, 2, 1}}, [&](const StrideOneCase& k, const ConvGeometry& g) {
    const int64_t OH = g.OH, OW = g.OW;
    const Tensor x = normal({k.N, k.C, k.H, k.W}).to(hg::bf16), w = normal({k.O, k.C, k.k, k.k}).to(hg::bf16);
    const Tensor bias = normal({k.O}).to(hg::bf16), dy = normal({k.N, k.O, OH, OW}).to(hg::bf16);
    at_each_level([&] {
      if (!hg::cpu::has_native_bf16()) {
        CHECK_THROWS_AS(hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, x, w, bias, g, false), hg::Error);
        return;
      }
      for (bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor wide = hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, x, w, bias, g, relu);
        const Tensor im2col = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, bias, g, relu);
        CHECK_CLOSE_WITH(wide, im2col, kExact);
        const Tensor y_or_none = relu ? im2col : Tensor();
        const auto wide_grads = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideColumns, x, w, dy, y_or_none, g,
                                                                       true, true, true);
        const auto flipped = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2colFlipped, x, w, dy, y_or_none, g,
                                                                    true, true, true);
        CHECK_CLOSE_WITH(wide_grads.x, flipped.x, kExact);
        CHECK_CLOSE_WITH(wide_grads.w, flipped.w, kExact);
        CHECK_CLOSE_WITH(wide_grads.b, flipped.b, kExact);
      }
    });
  });
  // Outputs in f32's subnormal range, which the bf16 rounding instruction would flush to zero:
  // rounded as convert_from_float rounds them. (The bf16 products themselves flush subnormals, so
  // the outputs come from a subnormal bias added to products of ~1e-39.)
  if (hg::cpu::has_native_bf16()) {
    const ConvGeometry g{4, 16, 7, 7, 16, 3, 3, 1, 1, 7, 7};
    const Tensor x = (normal({4, 16, 7, 7}) * 1e-20).to(hg::bf16), w = (normal({16, 16, 3, 3}) * 1e-19).to(hg::bf16);
    const Tensor bias = (normal({16}) * 1e-39).to(hg::bf16);
    const Tensor wide = hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, x, w, bias, g, false);
    const Tensor im2col = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, bias, g, false);
    CHECK(hg::sum(hg::ne(im2col, hg::zeros_like(im2col))).item<double>() > 0);  // (not all flushed)
    CHECK_CLOSE_WITH(wide, im2col, kExact);
  }
  // Stride 2 reads the four phase planes (kernels/cpu/wide_rows.h): the same products as im2col's,
  // in the same order -- odd and even sizes and paddings, 2x2 to 5x5 kernels. Dilated stride 2
  // and stride 3 have no wide columns.
  if (hg::cpu::has_native_bf16()) {
    for (const ConvGeometry& g : {ConvGeometry{3, 16, 28, 28, 32, 3, 3, 2, 1, 14, 14}, ConvGeometry{2, 5, 9, 8, 7, 3, 3, 2, 0, 4, 3},
                                  ConvGeometry{4, 3, 11, 10, 6, 5, 5, 2, 2, 6, 5}, ConvGeometry{2, 4, 7, 7, 8, 2, 2, 2, 1, 4, 4}}) {
      const std::string shape = std::to_string(g.H) + "x" + std::to_string(g.W) + ", k " + std::to_string(g.kh) + ", pad " + std::to_string(g.pad);
      CAPTURE(shape);
      const Tensor x = normal({g.N, g.C, g.H, g.W}).to(hg::bf16), w = normal({g.O, g.C, g.kh, g.kw}).to(hg::bf16);
      const Tensor bias = normal({g.O}).to(hg::bf16);
      for (bool relu : {false, true})
        CHECK_CLOSE_WITH(hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, x, w, bias, g, relu),
                         hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, bias, g, relu), kExact);
    }
    ConvGeometry dilated{2, 4, 9, 9, 4, 3, 3, 2, 2, 3, 3};
    dilated.dilation = 2;
    const ConvGeometry stride_three{2, 4, 9, 9, 4, 3, 3, 3, 1, 3, 3};
    for (const ConvGeometry& g : {dilated, stride_three})
      CHECK_THROWS_AS(hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, normal({2, 4, 9, 9}).to(hg::bf16),
                                                    normal({4, 4, 3, 3}).to(hg::bf16), Tensor(), g, false),
                      hg::Error);
  }
}

namespace {
// Whether this CPU level has the wide-rows kernels (ConvAlgorithm::WideRows; f32 GEMM panels).
bool wide_rows_here(hg::DType dtype = hg::f32) {
  return hg::cpu::level_includes(hg::cpu::isa(), Isa::Avx2) && !(dtype == hg::bf16 && hg::cpu::has_native_bf16());
}
}  // namespace

// The weight and bias gradients as dot products over wide rows (kernels/cpu/conv_weight_grad.h;
// ConvAlgorithm::WideRows, which Auto uses for f32 GEMM panels at the AVX2 and AVX-512 levels on
// layers like ResNet-20's): against the f64 truth and im2col + GEMM, with and without the relu
// epilogue's mask, for f32, f16 and bf16 (bf16 takes this path only on a CPU without native bf16
// products). The cases cross the kernel's edges: channel and tap counts that
// are not multiples of its register blocks (4 x 6 for AVX-512, 2 x 5 for AVX2), padding 0 to 2,
// dilation, 1x1 and 5x5 kernels, 7x7 maps whose parts of 32 images end inside the batch, and a
// 61x60 map deeper than one 2048-value chunk (partial sums kept between chunks).
TEST_CASE("conv.wide_rows_weight_grad_matches_the_reference_and_im2col") {
  hg::manual_seed(17);
  for_each_case({{2, 16, 16, 14, 14, 3, 1, 1}, {3, 5, 13, 7, 9, 3, 1, 1}, {2, 17, 3, 6, 5, 3, 0, 1},
                 {1, 4, 6, 5, 4, 3, 2, 1},     {1, 3, 4, 9, 8, 5, 2, 1},  {2, 6, 5, 4, 3, 1, 0, 1},
                 {1, 4, 3, 9, 10, 3, 2, 2},    {1, 33, 40, 1, 1, 3, 1, 1}, {37, 3, 7, 7, 7, 3, 1, 1},
                 {2, 2, 3, 61, 60, 3, 1, 1}}, [&](const StrideOneCase& k, const ConvGeometry& g) {
    const Tensor x = normal({k.N, k.C, k.H, k.W}), w = normal({k.O, k.C, k.k, k.k}), dy = normal({k.N, k.O, g.OH, g.OW});
    const Tensor y = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, true);
    const Tolerance tolerance = gemm_tolerance(k.N * g.OH * g.OW);  // (each entry sums N * OH * OW products)
    at_each_level([&] {
      if (!wide_rows_here()) {
        CHECK_THROWS_HG(hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, Tensor(), g, false, true, false),
                        "wide rows asked for");
        return;
      }
      for (bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor y_or_none = relu ? y : Tensor();
        const Tensor masked = relu ? dy * hg::gt(y, hg::zeros_like(y)) : dy;
        const auto truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                  masked.to(hg::f64), Tensor(), g, false, true, true);
        const auto wide = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, y_or_none, g, true, true, true);
        const auto im2col = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, y_or_none, g, true, true, true);
        CHECK_CLOSE_WITH(wide.w.to(hg::f64), truth.w, tolerance);
        CHECK_CLOSE_WITH(wide.b.to(hg::f64), truth.b, tolerance);
        CHECK_CLOSE_WITH(wide.w, im2col.w, tolerance);
        CHECK_CLOSE_WITH(wide.x, im2col.x, conv_tolerance(k.O * k.k * k.k / 9 + 1));  // (the input's: the direct kernel)
        // Without the input's gradient, and without the bias's: the same weight gradient.
        const auto weight_only = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, y_or_none, g, false, true, false);
        CHECK_CLOSE_WITH(weight_only.w, wide.w, kExact);
        CHECK_FALSE(weight_only.b.defined());
        for (hg::DType dtype : {hg::bf16, hg::f16}) {  // 16-bit values widened exactly, f32 sums, rounded once
          if (!wide_rows_here(dtype)) continue;  // (bf16 GEMM panels there: not this kernel)
          CAPTURE(dtype);
          const Tensor x16 = x.to(dtype), w16 = w.to(dtype), dy16 = dy.to(dtype), y16 = y.to(dtype);
          const Tensor x32 = x16.to(hg::f32), w32 = w16.to(hg::f32), dy32 = dy16.to(hg::f32), y32 = y16.to(hg::f32);
          const Tensor masked32 = relu ? dy32 * hg::gt(y32, hg::zeros_like(y32)) : dy32;
          const Tensor truth16 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x32.to(hg::f64), w32.to(hg::f64),
                                                                        masked32.to(hg::f64), Tensor(), g, false, true, false).w;
          const Tensor low = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x16, w16, dy16, relu ? y16 : Tensor(),
                                                                    g, false, true, false).w;
          const Tensor ref32 = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x32, w32, dy32, relu ? y32 : Tensor(),
                                                                      g, false, true, false).w;
          CHECK(low.dtype() == dtype);
          CHECK_LOW_PRECISION(low, ref32, truth16);
        }
      }
    });
  });
}

// The wide rows' zero columns multiply real input values by zero: an infinite input must still
// give NaN and infinity exactly where im2col's products give them, and finite values elsewhere
// (the parts that read it are recomputed on the valid pixels only). And the results -- forward,
// input, weight and bias gradients -- do not depend on the thread count.
TEST_CASE("conv.wide_rows_keep_im2col_s_non_finite_entries_and_ignore_the_thread_count") {
  hg::manual_seed(18);
  const StrideOneCase k{40, 3, 4, 7, 7, 3, 1, 1};
  const ConvGeometry g = k.geometry();
  std::vector<float> values = normal({k.N, k.C, k.H, k.W}).to_vector<float>();
  // Image 1, channel 2, row 3, the last column: tap column 0 reads it only over the zero columns.
  values[size_t(((1 * k.C + 2) * k.H + 3) * k.W + (k.W - 1))] = std::numeric_limits<float>::infinity();
  const Tensor x = hg::from_vector(values, {k.N, k.C, k.H, k.W});
  const Tensor w = normal({k.O, k.C, 3, 3}), dy = normal({k.N, k.O, g.OH, g.OW});
  at_each_level([&] {
    if (!wide_rows_here()) return;
    const std::vector<double> wide =
        hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, Tensor(), g, false, true, false).w.to_vector<double>();
    const std::vector<double> im2col =
        hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, Tensor(), g, false, true, false).w.to_vector<double>();
    int64_t finite = 0;
    for (size_t e = 0; e < wide.size(); ++e) {
      CAPTURE(e);
      CHECK(std::isnan(wide[e]) == std::isnan(im2col[e]));
      CHECK(std::isinf(wide[e]) == std::isinf(im2col[e]));
      if (std::isfinite(im2col[e])) {
        ++finite;
        CHECK(std::abs(wide[e] - im2col[e]) <= 1e-4 * (1 + std::abs(im2col[e])));
      } else if (std::isinf(im2col[e])) {
        CHECK(wide[e] == im2col[e]);
      }
    }
    CHECK(finite == int64_t(wide.size()) - 4 * 6);  // (channel 2's taps in kernel columns 1 and 2, for each output channel)
  });
  struct Threads {
    int saved = hg::get_num_threads();
    ~Threads() { hg::set_num_threads(saved); }
  } restore;
  const Tensor clean = normal({k.N, k.C, k.H, k.W});
  const ConvAlgorithm algorithm = wide_rows_here() ? ConvAlgorithm::WideRows : ConvAlgorithm::Auto;
  hg::set_num_threads(1);
  const auto one = hg::kernels::cpu::conv2d_backward_with(algorithm, clean, w, dy, Tensor(), g, true, true, true);
  const Tensor forward_one = hg::kernels::cpu::conv2d_with(algorithm, clean, w, Tensor(), g, true);
  hg::set_num_threads(2);
  const auto two = hg::kernels::cpu::conv2d_backward_with(algorithm, clean, w, dy, Tensor(), g, true, true, true);
  CHECK_CLOSE_WITH(two.w, one.w, kExact);
  CHECK_CLOSE_WITH(two.b, one.b, kExact);
  CHECK_CLOSE_WITH(two.x, one.x, kExact);
  CHECK_CLOSE_WITH(hg::kernels::cpu::conv2d_with(algorithm, clean, w, Tensor(), g, true), forward_one, kExact);
}

namespace {
// ConvAlgorithm::WideRows' forward of x, w, b (f32) against the f64 truth and im2col + GEMM, with
// and without relu; and in bf16 and f16 where the level computes them on wide rows (widened,
// rounded once).
void check_wide_rows_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeometry& g, bool relu) {
  const Tolerance tolerance = gemm_tolerance(g.C * g.kh * g.kw);
  const Tensor truth = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64), b.to(hg::f64), g, relu);
  const Tensor out = hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, x, w, b, g, relu);
  CHECK_CLOSE_WITH(out.to(hg::f64), truth, tolerance);
  CHECK_CLOSE_WITH(out, hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, b, g, relu), tolerance);
  for (hg::DType dtype : {hg::bf16, hg::f16}) {
    if (!wide_rows_here(dtype)) continue;  // (bf16 GEMM panels there: not this kernel)
    CAPTURE(dtype);
    const Tensor x16 = x.to(dtype), w16 = w.to(dtype), b16 = b.to(dtype);
    const Tensor x32 = x16.to(hg::f32), w32 = w16.to(hg::f32), b32 = b16.to(hg::f32);
    const Tensor truth16 = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x32.to(hg::f64), w32.to(hg::f64),
                                                         b32.to(hg::f64), g, relu);
    const Tensor low = hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, x16, w16, b16, g, relu);
    CHECK(low.dtype() == dtype);
    CHECK_LOW_PRECISION(low, hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x32, w32, b32, g, relu), truth16);
  }
}

// At each CPU level: where wide rows are not there, the hg::Error they answer with; elsewhere, for
// the relu epilogue off and on, the forward (check_wide_rows_forward), then
// backward(y_or_none, masked): the gradients' checks, given the forward's output when relu is on
// and dy masked as relu's derivative masks it.
template <class Backward>
void check_wide_rows_at_each_level(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                                   const ConvGeometry& g, const Backward& backward) {
  const Tensor y = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, true);
  at_each_level([&] {
    if (!wide_rows_here()) {
      CHECK_THROWS_HG(hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, x, w, b, g, false), "wide rows asked for");
      return;
    }
    for (bool relu : {false, true}) {
      CAPTURE(relu);
      check_wide_rows_forward(x, w, b, g, relu);
      backward(relu ? y : Tensor(), relu ? dy * hg::gt(y, hg::zeros_like(y)) : dy);
    }
  });
}
}  // namespace

// The forward and the flipped input gradient as direct convolutions on wide rows
// (ConvAlgorithm::WideRows, kernels/cpu/conv_wide_rows.h; f32 GEMM panels at the AVX2 and AVX-512
// levels, an hg::Error elsewhere): against the f64 truth and im2col + GEMM, with bias and relu, for
// f32, f16 and bf16 (widened, rounded once), across the kernel's edges -- output channel counts
// that are not multiples of its 4- or 8-channel blocks, positions that end inside a 96-position (24 on
// AVX2) block, padding 0 to 2, dilation, 1x1 and 5x5 kernels, parts of 32 7x7 images that end
// inside the batch. (Auto picks it for the kernels larger than 1x1 at the AVX-512 levels.)
TEST_CASE("conv.wide_rows_match_the_reference_and_im2col") {
  hg::manual_seed(19);
  for_each_case({{2, 16, 16, 14, 14, 3, 1, 1}, {3, 5, 13, 7, 9, 3, 1, 1}, {2, 17, 3, 6, 5, 3, 0, 1},
                 {1, 4, 6, 5, 4, 3, 2, 1},     {1, 3, 4, 9, 8, 5, 2, 1},  {2, 6, 5, 4, 3, 1, 0, 1},
                 {1, 4, 3, 9, 10, 3, 2, 2},    {1, 33, 40, 1, 1, 3, 1, 1}, {37, 3, 7, 7, 7, 3, 1, 1},
                 {1, 2, 3, 61, 60, 3, 1, 1}}, [&](const StrideOneCase& k, const ConvGeometry& g) {
    const Tensor x = normal({k.N, k.C, k.H, k.W}), w = normal({k.O, k.C, k.k, k.k}), b = normal({k.O});
    const Tensor dy = normal({k.N, k.O, g.OH, g.OW});
    const Tolerance input_tolerance = gemm_tolerance(k.O * k.k * k.k);
    check_wide_rows_at_each_level(x, w, b, dy, g, [&](const Tensor& y_or_none, const Tensor& masked) {
      const Tensor input_truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                        masked.to(hg::f64), Tensor(), g, true, false, false).x;
      const auto rows = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, y_or_none, g, true, true, true);
      const auto im2col = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, y_or_none, g, true, true, true);
      CHECK_CLOSE_WITH(rows.x.to(hg::f64), input_truth, input_tolerance);
      CHECK_CLOSE_WITH(rows.w, im2col.w, gemm_tolerance(k.N * g.OH * g.OW));  // (the weight's and bias's: the dot products)
      CHECK_CLOSE_WITH(rows.b, im2col.b, gemm_tolerance(k.N * g.OH * g.OW));
    });
  });
  // NaN stays in the outputs that read it, as relu keeps it.
  const StrideOneCase k{2, 3, 5, 6, 6, 3, 1, 1};
  const ConvGeometry g = k.geometry();
  std::vector<float> values = normal({k.N, k.C, k.H, k.W}).to_vector<float>();
  values[size_t(((1 * k.C + 1) * k.H + 2) * k.W + 3)] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = hg::from_vector(values, {k.N, k.C, k.H, k.W}), w = normal({k.O, k.C, 3, 3});
  at_each_level([&] {
    if (!wide_rows_here()) return;
    for (bool relu : {false, true}) {
      const std::vector<double> rows = hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, x, w, Tensor(), g, relu).to_vector<double>();
      const std::vector<double> im2col = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, relu).to_vector<double>();
      int64_t nans = 0;
      for (size_t e = 0; e < rows.size(); ++e) {
        CHECK(std::isnan(rows[e]) == std::isnan(im2col[e]));
        nans += std::isnan(rows[e]);
      }
      CHECK(nans == k.O * 9);  // (image 1: every output channel's 3x3 neighbourhood of the NaN)
    }
  });
}

// The stride-2 layout's column split (kernels/cpu/wide_rows.h deinterleave) at each level, for
// lengths around its 16- and 32-value steps: every value where it belongs, nothing written past.
TEST_CASE("conv.wide_rows_deinterleave_splits_evens_and_odds") {
  at_each_level([&] {
    for (int64_t n : {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65}) {
      CAPTURE(n);
      std::vector<float> src(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) src[size_t(k)] = float(k) + 0.5f;
      std::vector<float> evens(size_t(n / 2 + 8), -1.0f), odds(size_t(n / 2 + 8), -1.0f);
      hg::kernels::cpu::deinterleave(src.data(), n, evens.data(), odds.data());
      for (int64_t k = 0; k < int64_t(evens.size()); ++k) {
        CHECK(evens[size_t(k)] == (2 * k < n ? float(2 * k) + 0.5f : -1.0f));
        CHECK(odds[size_t(k)] == (2 * k + 1 < n ? float(2 * k + 1) + 0.5f : -1.0f));
      }
    }
  });
}

// Stride-2 convolutions on wide rows (four phase planes per channel, kernels/cpu/wide_rows.h):
// the forward and the weight and bias gradients against the f64 truth and im2col + GEMM, with
// bias and relu, f32 and 16-bit; odd and even sizes and paddings (each phase plane's row and
// column counts), 2x2, 3x3 and 5x5 kernels, channel counts off the 8- and 4-channel blocks, and
// 7x7 outputs in parts of 32 images that end inside the batch. Dilation with stride 2 is not
// served (an hg::Error when asked for).
TEST_CASE("conv.wide_rows_stride_two_matches_the_reference_and_im2col") {
  hg::manual_seed(23);
  struct Case {
    int64_t N, C, O, H, W, k, pad;
  };
  for (const Case& k : {Case{2, 16, 16, 28, 28, 3, 1}, Case{3, 5, 13, 9, 8, 3, 1}, Case{2, 6, 8, 11, 10, 3, 0},
                        Case{1, 4, 6, 12, 13, 5, 2}, Case{2, 3, 5, 8, 9, 2, 0}, Case{37, 3, 8, 14, 14, 3, 1},
                        Case{1, 2, 3, 7, 6, 3, 2}}) {
    const int64_t OH = (k.H + 2 * k.pad - k.k) / 2 + 1, OW = (k.W + 2 * k.pad - k.k) / 2 + 1;
    const ConvGeometry g{k.N, k.C, k.H, k.W, k.O, k.k, k.k, 2, k.pad, OH, OW};
    const std::string shape = std::to_string(k.N) + "x" + std::to_string(k.C) + "x" + std::to_string(k.H) + "x" +
                              std::to_string(k.W) + " -> " + std::to_string(k.O) + ", k " + std::to_string(k.k) +
                              ", pad " + std::to_string(k.pad);
    CAPTURE(shape);
    const Tensor x = normal({k.N, k.C, k.H, k.W}), w = normal({k.O, k.C, k.k, k.k}), b = normal({k.O});
    const Tensor dy = normal({k.N, k.O, OH, OW});
    check_wide_rows_at_each_level(x, w, b, dy, g, [&](const Tensor& y_or_none, const Tensor& masked) {
      const auto grad_truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                     masked.to(hg::f64), Tensor(), g, false, true, true);
      const auto wide = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, y_or_none, g, false, true, true);
      const Tolerance sums = gemm_tolerance(k.N * OH * OW);
      CHECK_CLOSE_WITH(wide.w.to(hg::f64), grad_truth.w, sums);
      CHECK_CLOSE_WITH(wide.b.to(hg::f64), grad_truth.b, sums);
    });
  }
  ConvGeometry dilated{1, 2, 9, 9, 3, 3, 3, 2, 2, 3, 3};
  dilated.dilation = 2;
  at_each_level([&] {
    CHECK_THROWS_HG(hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, normal({1, 2, 9, 9}), normal({3, 2, 3, 3}), Tensor(),
                                                  dilated, false),
                    "wide rows asked for");
  });
}

// The bf16 weight and bias gradients from the wide-columns plane (cpu::conv2d_weight_grad_wide_columns,
// which Auto uses for stride-1 and stride-2 bf16 layers on CPUs with native bf16 products): f32 sums of the
// exact bf16 products, against the f64 truth of the same bf16 values, with and without the relu
// epilogue's mask; at the AVX512-BF16 level (tap rows gathered before packing) and AMX (copied
// straight into tiles). The cases cross parts of 28 7x7 images that end inside the batch,
// padding 0 to 2, dilation, 5x5 kernels and channel counts off the GEMM's tiles; the thread count
// does not change the result, and an infinite input gives NaN and infinity exactly where
// im2col's products do.
TEST_CASE("conv.wide_columns_weight_grad_matches_the_reference") {
  hg::manual_seed(29);
  const auto wide_grads = [](const Tensor& x, const Tensor& dy, const Tensor& y, const ConvGeometry& g) {
    std::vector<float> dw(size_t(g.O * g.ckk())), db(size_t(g.O));
    hg::kernels::cpu::conv2d_weight_grad_wide_columns(x.data_ptr<hg::bfloat16>(), dy.data_ptr<hg::bfloat16>(),
                                                      y.defined() ? y.data_ptr<hg::bfloat16>() : nullptr, g, dw.data(),
                                                      db.data());
    return std::pair{hg::from_vector(dw, {g.O, g.C, g.kh, g.kw}), hg::from_vector(db, {g.O})};
  };
  for_each_case({{3, 16, 16, 28, 28, 3, 1, 1}, {37, 32, 32, 7, 7, 3, 1, 1}, {5, 8, 24, 14, 14, 3, 1, 1},
                 {4, 5, 13, 7, 9, 3, 0, 1},    {3, 3, 4, 9, 8, 5, 2, 1},    {9, 4, 3, 9, 10, 3, 2, 2},
                 {2, 7, 6, 5, 6, 3, 2, 1}}, [&](const StrideOneCase& k, const ConvGeometry& g) {
    const Tensor x = normal({k.N, k.C, k.H, k.W}).to(hg::bf16), w = normal({k.O, k.C, k.k, k.k}).to(hg::bf16);
    const Tensor dy = normal({k.N, k.O, g.OH, g.OW}).to(hg::bf16);
    const Tensor y = hg::kernels::cpu::conv2d_with(ConvAlgorithm::Im2col, x, w, Tensor(), g, true);
    at_each_level([&] {
      if (!hg::kernels::cpu::wide_columns_available()) return;
      for (bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor masked = relu ? dy.to(hg::f64) * hg::gt(y, hg::zeros_like(y)).to(hg::f64) : dy.to(hg::f64);
        const auto truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                  masked, Tensor(), g, false, true, true);
        const auto [dw, db] = wide_grads(x, dy, relu ? y : Tensor(), g);
        const Tolerance sums = gemm_tolerance(k.N * g.OH * g.OW);
        CHECK_CLOSE_WITH(dw.to(hg::f64), truth.w, sums);
        CHECK_CLOSE_WITH(db.to(hg::f64), truth.b, sums);
      }
    });
  });
  // Stride 2 (phase planes): odd and even sizes and paddings, 2x2 and 5x5 kernels, 7x7 outputs in
  // parts that end inside the batch.
  for (const ConvGeometry& g : {ConvGeometry{3, 16, 28, 28, 32, 3, 3, 2, 1, 14, 14}, ConvGeometry{2, 5, 9, 8, 7, 3, 3, 2, 0, 4, 3},
                                ConvGeometry{4, 3, 11, 10, 6, 5, 5, 2, 2, 6, 5}, ConvGeometry{2, 4, 7, 7, 8, 2, 2, 2, 1, 4, 4},
                                ConvGeometry{37, 8, 14, 14, 16, 3, 3, 2, 1, 7, 7}}) {
    const std::string shape = std::to_string(g.N) + " images " + std::to_string(g.H) + "x" + std::to_string(g.W) + ", k " + std::to_string(g.kh) + ", pad " + std::to_string(g.pad);
    CAPTURE(shape);
    const Tensor x = normal({g.N, g.C, g.H, g.W}).to(hg::bf16), w = normal({g.O, g.C, g.kh, g.kw}).to(hg::bf16);
    const Tensor dy = normal({g.N, g.O, g.OH, g.OW}).to(hg::bf16);
    at_each_level([&] {
      if (!hg::kernels::cpu::wide_columns_available()) return;
      const auto truth = hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64),
                                                                dy.to(hg::f64), Tensor(), g, false, true, true);
      const auto [dw, db] = wide_grads(x, dy, Tensor(), g);
      CHECK_CLOSE_WITH(dw.to(hg::f64), truth.w, gemm_tolerance(g.N * g.OH * g.OW));
      CHECK_CLOSE_WITH(db.to(hg::f64), truth.b, gemm_tolerance(g.N * g.OH * g.OW));
    });
  }
  if (!hg::kernels::cpu::wide_columns_available()) return;
  // (7x7: two parts of 32 images, a group each; 28x28: ten parts of two images, groups of two)
  for (const StrideOneCase& c : {StrideOneCase{40, 3, 4, 7, 7, 3, 1, 1}, StrideOneCase{20, 3, 4, 28, 28, 3, 1, 1}}) {
    const ConvGeometry g = c.geometry();
    std::vector<float> values = normal({c.N, c.C, c.H, c.W}).to_vector<float>();
    values[size_t(((13 * c.C + 2) * c.H + 3) * c.W + (c.W - 1))] = std::numeric_limits<float>::infinity();
    const Tensor x = hg::from_vector(values, {c.N, c.C, c.H, c.W}).to(hg::bf16);
    const Tensor w = normal({c.O, c.C, 3, 3}).to(hg::bf16), dy = normal({c.N, c.O, g.OH, g.OW}).to(hg::bf16);
    const std::vector<double> wide = wide_grads(x, dy, Tensor(), g).first.to_vector<double>();
    const std::vector<double> im2col =
        hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x.to(hg::f64), w.to(hg::f64), dy.to(hg::f64), Tensor(), g,
                                               false, true, false).w.to_vector<double>();
    int64_t finite = 0;
    for (size_t e = 0; e < wide.size(); ++e) {
      CAPTURE(e);
      CHECK(std::isnan(wide[e]) == std::isnan(im2col[e]));
      CHECK(std::isinf(wide[e]) == std::isinf(im2col[e]));
      finite += std::isfinite(wide[e]);
    }
    CHECK(finite == int64_t(wide.size()) - 4 * 6);  // (channel 2's taps in kernel columns 1 and 2, for each output channel)
  }
  const StrideOneCase k{40, 3, 4, 7, 7, 3, 1, 1};
  const ConvGeometry g = k.geometry();
  const Tensor dy = normal({k.N, k.O, g.OH, g.OW}).to(hg::bf16);
  struct Threads {
    int saved = hg::get_num_threads();
    ~Threads() { hg::set_num_threads(saved); }
  } restore;
  const Tensor clean = normal({k.N, k.C, k.H, k.W}).to(hg::bf16);
  hg::set_num_threads(1);
  const auto one = wide_grads(clean, dy, Tensor(), g);
  hg::set_num_threads(2);
  const auto two = wide_grads(clean, dy, Tensor(), g);
  CHECK_CLOSE_WITH(two.first, one.first, kExact);
  CHECK_CLOSE_WITH(two.second, one.second, kExact);
}
