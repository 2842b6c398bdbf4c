// The tensor core: the dtype table and promotion, factories, views sharing storage, contiguous
// copies, conversions between every pair of dtypes, element access, printing, and the errors
// that misuse raises (docs/testing.md scenarios 7 and 8 for shapes).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "test_support.h"

using hg::Tensor;

TEST_CASE("dtype.table_gives_every_property") {
  CHECK(hg::dtype_name(hg::f32) == "f32");
  CHECK(hg::dtype_name(hg::bf16) == "bf16");
  CHECK(hg::element_size(hg::f64) == 8);
  CHECK(hg::element_size(hg::f16) == 2);
  CHECK(hg::element_size(hg::u8) == 1);
  CHECK(hg::is_floating(hg::bf16));
  CHECK_FALSE(hg::is_floating(hg::i64));
  for (const hg::DTypeInfo& info : hg::kDTypeTable) CHECK(hg::dtype_info(info.dtype).name == info.name);
}

TEST_CASE("dtype.promotion_table_matches_pytorch") {
  using hg::promote_types;
  struct Row { hg::DType a, b, expected; };
  const Row table[] = {
      {hg::f16, hg::f32, hg::f32}, {hg::bf16, hg::f16, hg::f32}, {hg::bf16, hg::f32, hg::f32},
      {hg::f32, hg::f64, hg::f64}, {hg::f16, hg::f64, hg::f64},  {hg::i64, hg::f16, hg::f16},
      {hg::i32, hg::bf16, hg::bf16}, {hg::u8, hg::i32, hg::i32}, {hg::i32, hg::i64, hg::i64},
      {hg::u8, hg::f32, hg::f32},  {hg::f16, hg::f16, hg::f16},  {hg::i64, hg::u8, hg::i64},
  };
  for (const Row& r : table) {
    CAPTURE(r.a);
    CAPTURE(r.b);
    CHECK(promote_types(r.a, r.b) == r.expected);
    CHECK(promote_types(r.b, r.a) == r.expected);
  }
}

TEST_CASE("dtype.promotion_is_the_same_for_every_pair") {
  // The complete 7 x 7 matrix, written out (rows and columns in DType order: f32 f64 f16 bf16 i32
  // i64 u8), so that deriving promotion from the table's ranks cannot drift from PyTorch's rules.
  // The 8-bit floats promote only with themselves (dtype.float8_promotes_only_with_itself).
  using namespace hg;
  const size_t computing_dtypes = 7;
  const DType expected[7][7] = {
      {f32, f64, f32, f32, f32, f32, f32},          {f64, f64, f64, f64, f64, f64, f64},
      {f32, f64, f16, f32, f16, f16, f16},          {f32, f64, f32, bf16, bf16, bf16, bf16},
      {f32, f64, f16, bf16, i32, i64, i32},         {f32, f64, f16, bf16, i64, i64, i64},
      {f32, f64, f16, bf16, i32, i64, u8},
  };
  for (size_t a = 0; a < computing_dtypes; ++a)
    for (size_t b = 0; b < computing_dtypes; ++b) {
      const DType da = DType(a), db = DType(b);
      CAPTURE(da);
      CAPTURE(db);
      CHECK(promote_types(da, db) == expected[a][b]);
    }
}

TEST_CASE("dtype.table_gives_compute_and_accumulate_dtypes") {
  using namespace hg;
  // compute: what kernels do arithmetic in (Acc<T>); accumulate: sums and statistics.
  const DType compute[] = {f32, f64, f32, f32, i32, i64, u8, f32, f32};
  const DType accumulate[] = {f32, f64, f32, f32, i64, i64, i64, f32, f32};
  for (size_t i = 0; i < kNumDTypes; ++i) {
    const DType d = DType(i);
    CAPTURE(d);
    CHECK(compute_dtype(d) == compute[i]);
    CHECK(accumulate_dtype(d) == accumulate[i]);
  }
  static_assert(std::is_same_v<Acc<half>, float> && std::is_same_v<Acc<bfloat16>, float> &&
                std::is_same_v<Acc<float>, float> && std::is_same_v<Acc<double>, double> &&
                std::is_same_v<Acc<int32_t>, int32_t> && std::is_same_v<Acc<uint8_t>, uint8_t>);
  static_assert(dtype_of<half>() == f16 && dtype_of<int64_t>() == i64 && dtype_of<uint8_t>() == u8);
  static_assert(std::is_same_v<element_type<DType::BF16>, bfloat16>);
  static_assert(is_floating_type_v<half> && !is_floating_type_v<int32_t>);
  CHECK(is_16bit_floating(f16));
  CHECK(is_16bit_floating(bf16));
  CHECK_FALSE(is_16bit_floating(f32));
  CHECK_FALSE(is_16bit_floating(i32));
  // An integer sum is i64, a floating one keeps its dtype (reductions read the accumulate column).
  CHECK(sum(from_vector(std::vector<int32_t>{1, 2}, {2})).dtype() == i64);
  CHECK(sum(from_vector(std::vector<uint8_t>{200, 100}, {2})).item<int64_t>() == 300);
  CHECK(sum(ones({3}, {.dtype = f16})).dtype() == f16);
}

TEST_CASE("tensor.factories_fill_values") {
  CHECK(hg::zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(hg::ones({4}, {.dtype = hg::i64}).to_vector<int64_t>() == std::vector<int64_t>(4, 1));
  CHECK(hg::full({2}, 2.5, {.dtype = hg::bf16}).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(hg::arange(4).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  const Tensor v = hg::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.dtype() == hg::i64);
  CHECK(v.shape() == hg::Shape{2, 3});
  CHECK(v.numel() == 6);
  CHECK(v.dim() == 2);
  CHECK(v.size(-1) == 3);
  const Tensor f = hg::from_vector(std::vector<double>{0.5, 1.5}, {2}, {.dtype = hg::f16});
  CHECK(f.dtype() == hg::f16);
  CHECK(f.to_vector<float>() == std::vector<float>{0.5f, 1.5f});
  CHECK(hg::full({}, 3.0).item<float>() == 3.f);
  CHECK(hg::empty({0, 5}).numel() == 0);
}

// full/zeros/ones fill a contiguous tensor directly, in parallel chunks; fill_ on a strided view
// goes through copy_into's broadcast. Both give the dtype's conversion of the value (to()'s), and
// a view's fill leaves the elements outside it alone.
TEST_CASE("tensor.fill_gives_the_converted_value_in_every_dtype_and_layout") {
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16, hg::i32, hg::i64, hg::u8, hg::f8e4m3, hg::f8e5m2}) {
    CAPTURE(dt);
    const bool integral = dt == hg::i32 || dt == hg::i64 || dt == hg::u8;
    const double value = integral ? 7.0 : 1.0 / 3.0;  // (1/3 rounds differently in every floating dtype)
    const double expected = hg::from_vector(std::vector<double>{value}, {1}).to(dt).to(hg::f64).item<double>();
    const std::vector<double> big = hg::full({100003}, value, {.dtype = dt}).to(hg::f64).to_vector<double>();
    CHECK(std::count(big.begin(), big.end(), expected) == 100003);  // more than one parallel chunk
    if (dt == hg::f8e4m3 || dt == hg::f8e5m2) continue;  // storage only: no in-place ops
    Tensor grid = hg::zeros({4, 6}, {.dtype = dt});
    {
      hg::NoGradGuard no_grad;
      hg::narrow(grid, 1, 2, 3).fill_(value);  // columns 2..4 of every row: a strided view
    }
    const std::vector<double> cells = grid.to(hg::f64).to_vector<double>();
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 6; ++c) CHECK(cells[size_t(r * 6 + c)] == (c >= 2 && c < 5 ? expected : 0.0));
  }
}

TEST_CASE("tensor.views_share_storage_and_contiguous_copies") {
  const Tensor x = hg::arange(6).reshape({2, 3});
  const Tensor t = x.transpose(0, 1);
  CHECK(t.shape() == hg::Shape{3, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.raw_data() == x.raw_data());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.raw_data() != x.raw_data());
  CHECK(c.to_vector<float>() == t.to_vector<float>());
  const Tensor p = hg::arange(24).reshape({2, 3, 4}).permute({2, 0, 1});
  CHECK(p.shape() == hg::Shape{4, 2, 3});
  CHECK(p.contiguous().to_vector<float>()[1] == 4.f);
  const Tensor f = hg::arange(24).reshape({2, 3, 4}).flatten(1);
  CHECK(f.shape() == hg::Shape{2, 12});
  CHECK(hg::arange(24).reshape({2, 3, 4}).flatten().shape() == hg::Shape{24});
  // reshape of a transposed tensor cannot be a view: it copies; view() refuses.
  CHECK(t.reshape({6}).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_HG(t.view({6}), "view: size [6] is not compatible");
  CHECK(t.reshape({3, 2}).raw_data() == x.raw_data());  // same shape: still a view
  // an offset view: narrow shares storage from element 2 on.
  const Tensor n = hg::narrow(hg::arange(10), 0, 2, 5);
  CHECK(n.storage_offset() == 2);
  CHECK(n.to_vector<float>() == std::vector<float>{2, 3, 4, 5, 6});
  const Tensor e = hg::expand(hg::from_vector(std::vector<float>{1, 2}, {2, 1}), {2, 3});
  CHECK(e.strides()[1] == 0);
  CHECK(e.contiguous().to_vector<float>() == std::vector<float>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("tensor.to_dtype_converts_between_every_pair") {
  const std::vector<double> values{0.0, 1.0, -2.0, 3.75, 100.0};
  for (const hg::DTypeInfo& from : hg::kDTypeTable) {
    for (const hg::DTypeInfo& to : hg::kDTypeTable) {
      CAPTURE(from.name);
      CAPTURE(to.name);
      std::vector<double> source = values;
      if (from.dtype == hg::u8) source = {0, 1, 2, 3, 100};  // u8 holds no negatives
      const Tensor x = hg::from_vector(source, {5}).to(from.dtype);
      const std::vector<double> got = x.to(to.dtype).to_vector<double>();
      // e5m2 holds neither 3.75 nor 100 (2 mantissa bits): expect the nearest code's value
      // (test_float8.cpp checks the rounding itself against ml_dtypes).
      const auto rounded_to = [](hg::DType d, double v) -> double {
        if (d == hg::f8e5m2) return float(hg::float8_e5m2(v));
        if (d == hg::f8e4m3) return float(hg::float8_e4m3(v));
        return v;
      };
      for (size_t i = 0; i < source.size(); ++i) {
        source[i] = rounded_to(from.dtype, source[i]);
        double expected = rounded_to(to.dtype, from.is_floating ? source[i] : std::trunc(source[i]));
        if (!to.is_floating || !from.is_floating) expected = std::trunc(expected);
        // u8 from a negative: floats saturate to 0, integers wrap modulo 256 (both defined).
        if (to.dtype == hg::u8 && expected < 0) expected = from.is_floating ? 0 : expected + 256;
        CHECK(got[i] == expected);
      }
    }
  }
}

TEST_CASE("tensor.float_to_int_truncates_and_saturates") {
  const Tensor x = hg::from_vector(std::vector<float>{2.9f, -2.9f, 1e20f, -1e20f, NAN, 300.f}, {6});
  CHECK(x.to(hg::i32).to_vector<int32_t>() ==
        std::vector<int32_t>{2, -2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0, 300});
  CHECK(x.to(hg::u8).to_vector<uint8_t>() == std::vector<uint8_t>{2, 0, 255, 0, 0, 255});
  CHECK(x.to(hg::i64).to_vector<int64_t>()[2] == std::numeric_limits<int64_t>::max());
}

TEST_CASE("tensor.item_and_to_vector_convert_and_check") {
  CHECK(hg::full({1, 1}, 7.0, {.dtype = hg::f16}).item<double>() == 7.0);
  CHECK_THROWS_HG(hg::zeros({2}).item<float>(), "a tensor with 2 elements");
  CHECK_THROWS_HG(hg::zeros({2}).data_ptr<double>(), "holds f32 elements, but f64 was requested");
  CHECK_THROWS_HG(Tensor().shape(), "undefined tensor");
}

TEST_CASE("tensor.printing_shows_values_shape_dtype_device") {
  std::ostringstream small;
  small << hg::from_vector(std::vector<float>{1.5f, -2.f, 3.f, 4.25f}, {2, 2});
  CHECK(small.str() == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]], shape=[2, 2], dtype=f32, device=cpu)");
  std::ostringstream whole;
  whole << hg::arange(3, {.dtype = hg::i64});
  CHECK(whole.str() == "tensor([0, 1, 2], shape=[3], dtype=i64, device=cpu)");
  std::ostringstream big;
  big << hg::arange(2000).reshape({2, 1000});
  CHECK(big.str().find("...") != std::string::npos);
  CHECK(big.str().find("997.,  998.,  999.]") != std::string::npos);
  std::ostringstream scalar;
  scalar << hg::full({}, 0.5, {.dtype = hg::bf16});
  CHECK(scalar.str() == "tensor(0.5000, shape=[], dtype=bf16, device=cpu)");
}

TEST_CASE("shape.errors_name_the_op_and_sizes") {  // docs/testing.md scenario 7
  CHECK_THROWS_HG(hg::zeros({2, 3}).reshape({4}), "reshape: shape [4] is invalid for input of size 6");
  CHECK_THROWS_HG(hg::zeros({2, 3}).reshape({-1, -1}), "only one dimension can be -1");
  CHECK_THROWS_HG(hg::zeros({2, 3}).transpose(0, 2), "dimension out of range (expected to be in range of [-2, 1], but got 2)");
  CHECK_THROWS_HG(hg::zeros({2, 3}).permute({0, 0}), "repeats");
  CHECK_THROWS_HG(hg::zeros({2, 3}) + hg::zeros({4}), "shapes [2, 3] and [4] cannot be broadcast");
  CHECK_THROWS_HG(hg::narrow(hg::zeros({4}), 0, 2, 3), "out of range for dimension 0 of size 4");
}

TEST_CASE("shape.negative_and_overflowing_sizes_throw_before_allocating") {  // scenario 8
  const int64_t before = hg::memory::allocated();
  CHECK_THROWS_HG(hg::empty({-1, 3}), "negative dimension");
  CHECK_THROWS_HG(hg::empty({int64_t(1) << 40, int64_t(1) << 40}), "more elements than fit in int64");
  CHECK_THROWS_HG(hg::empty({int64_t(1) << 62}, {.dtype = hg::f64}), "overflow int64");
  CHECK_THROWS_HG(hg::as_strided(hg::zeros({4}), {2}, {1}, int64_t(1) << 62), "reaches element");
  CHECK_THROWS_HG(hg::as_strided(hg::zeros({4}), {3, 3}, {1, int64_t(1) << 62}, 0), "overflows int64");
  CHECK(hg::memory::allocated() == before);
}

TEST_CASE("memory.huge_allocation_is_a_clean_error_and_the_allocator_keeps_working") {  // scenario 9
  CHECK_THROWS_HG(hg::empty({int64_t(1) << 40}), "out of memory: tried to allocate 4096 GiB on cpu");
  const Tensor after = hg::ones({16});
  CHECK(hg::sum(after).item<float>() == 16.f);
}

TEST_CASE("memory.counters_track_live_and_peak_bytes") {
  const int64_t base = hg::memory::allocated();
  hg::memory::reset_peak();
  {
    const Tensor a = hg::empty({1024});  // 4096 bytes
    CHECK(hg::memory::allocated() == base + 4096);
    {
      const Tensor b = hg::empty({256}, {.dtype = hg::f16});  // 512 bytes
      CHECK(hg::memory::allocated() == base + 4608);
    }
    CHECK(hg::memory::allocated() == base + 4096);
    const Tensor view = a.reshape({32, 32});  // a view allocates nothing
    CHECK(hg::memory::allocated() == base + 4096);
  }
  CHECK(hg::memory::allocated() == base);
  CHECK(hg::memory::peak_allocated() == base + 4608);
  hg::memory::reset_peak();
  CHECK(hg::memory::peak_allocated() == base);
}

TEST_CASE("memory.cpu_buffers_are_64_byte_aligned") {
  for (int64_t n : {1, 3, 17, 1000}) {
    const Tensor t = hg::empty({n}, {.dtype = hg::u8});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
}

TEST_CASE("device.cuda_queries_never_throw") {
  CHECK(hg::Device::cpu().str() == "cpu");
  CHECK(hg::Device::cuda(1).str() == "cuda:1");
  CHECK_THROWS_HG(hg::Device::cuda(-1), "device index must be >= 0");
  if (!hg::cuda::is_available()) {
    CHECK(hg::cuda::device_count() == 0);
    hg::cuda::synchronize();  // a no-op without a device
    CHECK_THROWS_HG(hg::zeros({2}, {.device = hg::Device::cuda()}), "cuda:0");
    CHECK_THROWS_HG(hg::zeros({2}).to(hg::Device::cuda()), "cuda:0");
  }
}

TEST_CASE("device.cuda_tensors_round_trip" * doctest::skip(!hg_test::cuda_available())) {
  const hg::Device gpu = hg::Device::cuda();
  const int64_t base = hg::memory::allocated(gpu);
  const Tensor x = hg::arange(10).reshape({2, 5});
  const Tensor g = x.to(gpu);
  CHECK(g.device() == gpu);
  CHECK(hg::memory::allocated(gpu) == base + 40);
  CHECK(g.to(hg::Device::cpu()).to_vector<float>() == x.to_vector<float>());
  CHECK(g.transpose(0, 1).contiguous().to(hg::Device::cpu()).to_vector<float>() == x.t().contiguous().to_vector<float>());
  CHECK(g.to(hg::f16).to(hg::Device::cpu()).to_vector<float>() == x.to_vector<float>());
  CHECK(hg::full({3}, 2.0, {.device = gpu}).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("device.cuda_out_of_memory_is_an_error_and_the_allocator_recovers" * doctest::skip(!hg_test::cuda_available())) {
  CHECK_THROWS_HG(hg::empty({int64_t(1) << 40}, {.device = hg::Device::cuda()}), "CUDA out of memory");
  CHECK(hg::ones({4}, {.device = hg::Device::cuda()}).to_vector<float>() == std::vector<float>(4, 1.f));
}
