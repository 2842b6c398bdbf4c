// Your own data (issue 27): the Dataset interface, TensorDataset, any dataset through the
// DataLoader (default collate stacks, a collate of yours, per-example transforms with the
// loader's seeded streams, background prefetch, checkpoint and resume), the transforms' values,
// CIFAR10 on binary files written here, and read_csv on good and bad CSV files.
#include <filesystem>
#include <fstream>
#include <set>

#include "test_support.h"

using hg::Tensor;
namespace data = hg::data;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

// Example i of `t` (its row i) as its own tensor.
Tensor row(const Tensor& t, int64_t i) {
  std::vector<int64_t> dims(t.shape().begin() + 1, t.shape().end());
  return hg::narrow(t, 0, i, 1).reshape(hg::Shape(dims)).clone();
}

// 20 examples [2, 3, 4] whose every value encodes the example (100 * i + position), targets i % 3.
data::TensorDataset numbered(int64_t n = 20) {
  std::vector<float> x;
  for (int64_t i = 0; i < n; ++i)
    for (int p = 0; p < 24; ++p) x.push_back(float(100 * i + p));
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back(i % 3);
  return data::TensorDataset(hg::from_vector(x, {n, 2, 3, 4}), hg::from_vector(y, {n}));
}

// The example indices a batch of numbered() holds (value 0 of each example is 100 * i).
std::vector<int64_t> indices_of(const Tensor& x) {
  std::vector<int64_t> out;
  const std::vector<double> values = x.to_vector<double>();
  const size_t per = values.size() / size_t(x.shape()[0]);
  for (size_t b = 0; b < size_t(x.shape()[0]); ++b) out.push_back(int64_t(values[b * per]) / 100);
  return out;
}

// A dataset of the user's own: no get_batch, so the loader stacks get(i).
struct Squares : data::Dataset {
  int64_t size() const override { return 10; }
  data::Example get(int64_t i) const override {
    return {hg::full({1}, double(i)), hg::full({}, double(i * i), {.dtype = hg::i64})};
  }
};

std::vector<data::Batch> all_batches(data::DataLoader& loader) {
  std::vector<data::Batch> out;
  for (auto [x, y] : loader) out.push_back({x, y});
  return out;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

// ---- TensorDataset and stacking ------------------------------------------------------------------

TEST_CASE("datasets.tensor_dataset.examples_are_the_rows") {
  const data::TensorDataset ds = numbered();
  CHECK(ds.size() == 20);
  const data::Example e = ds.get(7);
  CHECK(e.x.shape() == hg::Shape{2, 3, 4});
  CHECK(bitwise_equal(e.x, row(ds.x(), 7)));
  CHECK(e.y.dim() == 0);
  CHECK(e.y.item<int64_t>() == 1);
  const auto batch = ds.get_batch({3, 0, 19});
  REQUIRE(batch.has_value());
  CHECK(indices_of(batch->x) == std::vector<int64_t>{3, 0, 19});
  CHECK(batch->y.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  // get_batch is exactly the default collate of get(i).
  const data::Example stacked = data::stack_examples({ds.get(3), ds.get(0), ds.get(19)});
  CHECK(bitwise_equal(stacked.x, batch->x));
  CHECK(bitwise_equal(stacked.y, batch->y));
}

TEST_CASE("datasets.tensor_dataset.errors") {
  CHECK_THROWS_HG(data::TensorDataset(hg::zeros({4, 2}), hg::zeros({5})), "first");
  CHECK_THROWS_HG(data::TensorDataset(hg::zeros({}), hg::zeros({})), "TensorDataset");
  CHECK_THROWS_HG(data::TensorDataset(Tensor(), hg::zeros({3})), "defined");
  const data::TensorDataset ds = numbered(4);
  CHECK_THROWS_HG(ds.get(4), "outside [0, 4)");
  CHECK_THROWS_HG(ds.get(-1), "outside [0, 4)");
  CHECK_THROWS_HG(ds.get_batch({0, 9}), "index 9");
}

TEST_CASE("datasets.stack_examples.refuses_mixed_examples") {
  CHECK_THROWS_HG(data::stack_examples({}), "no examples");
  CHECK_THROWS_HG(data::stack_examples({{hg::zeros({2}), hg::zeros({})}, {hg::zeros({3}), hg::zeros({})}}), "shape");
  CHECK_THROWS_HG(data::stack_examples({{hg::zeros({2}), hg::zeros({})}, {hg::zeros({2}, {.dtype = hg::f64}), hg::zeros({})}}),
                  "DataLoader");
  CHECK_THROWS_HG(data::stack_examples({{hg::zeros({2}), Tensor()}}), "without x or y");
}

// ---- any dataset through the DataLoader ----------------------------------------------------------

TEST_CASE("datasets.loader.every_example_once_per_epoch_in_a_seeded_order") {
  const data::TensorDataset ds = numbered();
  data::DataLoader loader(ds, {.batch_size = 6, .shuffle = true, .seed = 3});
  std::vector<std::vector<int64_t>> epochs;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    for (auto [x, y] : loader) {
      CHECK(x.shape()[1] == 2);
      const std::vector<int64_t> ids = indices_of(x);
      std::vector<int64_t> targets;
      for (int64_t i : ids) targets.push_back(i % 3);
      CHECK(y.to_vector<int64_t>() == targets);  // x and y stay paired
      seen.insert(seen.end(), ids.begin(), ids.end());
    }
    CHECK(seen.size() == 20);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 20);
    epochs.push_back(seen);
  }
  CHECK(epochs[0] != epochs[1]);  // reshuffled per epoch
  std::vector<int64_t> natural(20);
  for (int64_t i = 0; i < 20; ++i) natural[size_t(i)] = i;
  CHECK(epochs[0] != natural);
  // The same seed gives the same order; shuffle = false the natural one; drop_last drops 20 % 6.
  data::DataLoader again(ds, {.batch_size = 6, .shuffle = true, .seed = 3});
  std::vector<int64_t> first;
  for (auto [x, y] : again) for (int64_t i : indices_of(x)) first.push_back(i);
  CHECK(first == epochs[0]);
  data::DataLoader in_order(ds, {.batch_size = 6, .shuffle = false, .drop_last = true});
  std::vector<int64_t> ordered;
  for (auto [x, y] : in_order) for (int64_t i : indices_of(x)) ordered.push_back(i);
  CHECK(ordered == std::vector<int64_t>(natural.begin(), natural.begin() + 18));
}

TEST_CASE("datasets.loader.a_dataset_of_your_own_is_stacked_and_a_temporary_is_owned") {
  data::DataLoader loader(Squares{}, {.batch_size = 4, .shuffle = false});
  const std::vector<data::Batch> batches = all_batches(loader);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].x.shape() == hg::Shape{4, 1});
  CHECK(batches[0].y.shape() == hg::Shape{4});
  CHECK(batches[1].x.to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  CHECK(batches[1].y.to_vector<int64_t>() == std::vector<int64_t>{16, 25, 36, 49});
  CHECK(batches[2].x.shape() == hg::Shape{2, 1});
}

TEST_CASE("datasets.loader.collate_of_your_own_gets_the_examples") {
  const data::TensorDataset ds = numbered(8);
  int calls = 0;
  data::DataLoader loader(ds, {.batch_size = 3, .shuffle = false,
                               .collate = [&calls](const std::vector<data::Example>& examples) {
                                 ++calls;
                                 data::Example batch = data::stack_examples(examples);
                                 return data::Example{hg::sum(batch.x), batch.y};  // something the default never makes
                               }});
  const std::vector<data::Batch> batches = all_batches(loader);
  CHECK(calls == 3);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].x.dim() == 0);
  double expected = 0;
  for (int64_t i = 0; i < 3; ++i) for (int p = 0; p < 24; ++p) expected += 100 * i + p;
  CHECK(batches[0].x.item<double>() == expected);
  CHECK(batches[2].y.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
}

TEST_CASE("datasets.loader.transforms_follow_the_example_not_the_batch") {
  // Each example's augmentation depends on (seed, epoch, example index) only: batch size 3 and 8
  // and prefetch on or off give every example the same crop and flip.
  const Tensor images = hg::rand({16, 3, 8, 8});
  const data::TensorDataset ds(images, hg::arange(16, {.dtype = hg::i64}));
  const data::Transform augment = data::Compose({data::RandomCrop(8, {.padding = 2}), data::RandomHorizontalFlip(0.5)});
  auto per_example = [&](int64_t batch_size, bool prefetch, uint64_t seed) {
    data::DataLoader loader(ds, {.batch_size = batch_size, .seed = seed, .transform = augment, .prefetch = prefetch});
    std::map<int64_t, std::vector<float>> out;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto [x, y] : loader) {
        const std::vector<int64_t> ids = y.to_vector<int64_t>();
        for (size_t b = 0; b < ids.size(); ++b) out[ids[b] + 100 * epoch] = row(x, int64_t(b)).to_vector<float>();
      }
    return out;
  };
  const auto reference = per_example(3, false, 5);
  CHECK(reference.size() == 32);
  CHECK(per_example(8, false, 5) == reference);
  CHECK(per_example(3, true, 5) == reference);
  CHECK(per_example(3, false, 6) != reference);
  // The augmentation does something: some example differs from its original, and epochs differ.
  int changed = 0, epochs_differ = 0;
  for (int64_t i = 0; i < 16; ++i) {
    changed += reference.at(i) != row(images, i).to_vector<float>();
    epochs_differ += reference.at(i) != reference.at(i + 100);
  }
  CHECK(changed > 8);
  CHECK(epochs_differ > 8);
}

TEST_CASE("datasets.loader.prefetch_gives_the_same_batches_and_resumes_bitwise") {
  const data::TensorDataset ds = numbered(23);
  const data::DataLoaderOptions plain{.batch_size = 4, .seed = 9, .transform = data::RandomHorizontalFlip(0.5)};
  data::DataLoaderOptions fetched = plain;
  fetched.prefetch = true;
  data::DataLoader a(ds, plain), b(ds, fetched);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto batches_a = all_batches(a), batches_b = all_batches(b);
    REQUIRE(batches_a.size() == batches_b.size());
    for (size_t i = 0; i < batches_a.size(); ++i) {
      CHECK(bitwise_equal(batches_a[i].x, batches_b[i].x));
      CHECK(bitwise_equal(batches_a[i].y, batches_b[i].y));
    }
  }
  // Train on 2 batches and stop before the third (a prefetched fourth may be in flight),
  // checkpoint, resume: a batch counts as done when the loop moves past it.
  data::DataLoader whole(ds, fetched), cut(ds, fetched);
  std::vector<data::Batch> expected = all_batches(whole);
  size_t taken = 0;
  for (auto [x, y] : cut) {
    if (taken == 2) break;
    CHECK(bitwise_equal(x, expected[taken++].x));
  }
  data::DataLoader resumed(ds, fetched);
  resumed.load_state_dict(cut.state_dict());
  std::vector<data::Batch> rest = all_batches(resumed);
  REQUIRE(rest.size() == expected.size() - 2);
  for (size_t i = 0; i < rest.size(); ++i) CHECK(bitwise_equal(rest[i].x, expected[i + 2].x));
}

TEST_CASE("datasets.loader.mean_and_std_need_a_floating_x") {
  data::DataLoader loader(data::TensorDataset(hg::zeros({4, 2}, {.dtype = hg::i64}), hg::zeros({4})), {.batch_size = 2, .mean = 0.5});
  CHECK_THROWS_HG(*loader.begin(), ".mean/.std");
  CHECK_THROWS_HG(data::DataLoader(numbered(), {.batch_size = 0}), "batch_size");
}

// ---- transforms ----------------------------------------------------------------------------------

TEST_CASE("datasets.transforms.normalize_per_channel") {
  const Tensor x = hg::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  const Tensor y = data::Normalize({1, 5}, {2, 4})(x);
  CHECK_CLOSE(y, hg::from_vector<float>({0, 0.5f, 1, 1.5f, 0, 0.25f, 0.5f, 0.75f}, {2, 2, 2}));
  CHECK_CLOSE(data::Normalize({1}, {2})(x), (x - 1.0) / 2.0);
  CHECK(data::Normalize({0}, {1})(x.to(hg::f64)).dtype() == hg::f64);
  CHECK(data::Normalize({0}, {1})(hg::zeros({2, 2}, {.dtype = hg::u8})).dtype() == hg::f32);
  CHECK_THROWS_HG(data::Normalize({0, 1, 2}, {1, 1, 1})(x), "3 means");
  CHECK_THROWS_HG(data::Normalize({0}, {0}), "std");
  CHECK_THROWS_HG(data::Normalize({0, 1}, {1}), "as many means");
  CHECK_THROWS_HG(data::Normalize({0}, {1})(hg::zeros({2})), "[C, H, W]");
}

TEST_CASE("datasets.transforms.random_crop_is_a_window_of_the_padded_example") {
  // 1 channel 4x4 with values 1..16; padding 1 gives 6x6 with a zero border; a 4x4 window.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[size_t(i)] = float(i + 1);
  const Tensor x = hg::from_vector(v, {1, 4, 4});
  std::set<std::vector<float>> windows;
  for (uint64_t stream = 0; stream < 200; ++stream) {
    data::ExampleRandom random(1, stream);
    const Tensor c = data::RandomCrop(4, {.padding = 1})(x, random);
    REQUIRE(c.shape() == hg::Shape{1, 4, 4});
    const std::vector<float> got = c.to_vector<float>();
    // Find the offset (dy, dx) in [0, 2]^2 it came from.
    bool found = false;
    for (int dy = 0; dy <= 2 && !found; ++dy)
      for (int dx = 0; dx <= 2 && !found; ++dx) {
        bool same = true;
        for (int r = 0; r < 4; ++r)
          for (int col = 0; col < 4; ++col) {
            const int sr = r + dy - 1, sc = col + dx - 1;
            const float want = (sr < 0 || sr > 3 || sc < 0 || sc > 3) ? 0.0f : v[size_t(sr * 4 + sc)];
            same = same && got[size_t(r * 4 + col)] == want;
          }
        found = same;
      }
    CHECK(found);
    windows.insert(got);
  }
  CHECK(windows.size() == 9);  // every offset occurs
  data::ExampleRandom random(1, 0);
  CHECK(bitwise_equal(data::RandomCrop(4)(x, random), x));  // no padding, full size: itself
  CHECK(data::RandomCrop(2)(hg::zeros({5, 5})).shape() == hg::Shape{2, 2});
  CHECK_THROWS_HG(data::RandomCrop(5)(x), "does not fit");
  CHECK_THROWS_HG(data::RandomCrop(0), "size");
  CHECK_THROWS_HG(data::RandomCrop(2, {.padding = -1}), "padding");
}

TEST_CASE("datasets.transforms.horizontal_flip_and_compose") {
  const Tensor x = hg::from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  const Tensor mirrored = hg::from_vector<float>({3, 2, 1, 6, 5, 4}, {1, 2, 3});
  CHECK(bitwise_equal(data::RandomHorizontalFlip(1.0)(x), mirrored));
  CHECK(bitwise_equal(data::RandomHorizontalFlip(0.0)(x), x));
  int flipped = 0;
  for (uint64_t stream = 0; stream < 400; ++stream) {
    data::ExampleRandom random(2, stream);
    flipped += bitwise_equal(data::RandomHorizontalFlip(0.25)(x, random), mirrored);
  }
  CHECK(flipped > 60);   // ~100 of 400
  CHECK(flipped < 140);
  CHECK_THROWS_HG(data::RandomHorizontalFlip(1.5), "p must be in [0, 1]");
  // Compose applies in order: flip, then normalise -- not the other way round (which differs
  // only in where the per-channel values land, so use two channels).
  const Tensor two = hg::from_vector<float>({1, 2, 3, 4}, {2, 1, 2});
  const data::Compose both({data::RandomHorizontalFlip(1.0), data::Normalize({0, 10}, {1, 1})});
  CHECK(bitwise_equal(both(two), hg::from_vector<float>({2, 1, -6, -7}, {2, 1, 2})));
  // Your own transform is any callable taking the example and its random stream.
  const data::Compose own({[](const Tensor& t, data::ExampleRandom&) { return t * 2.0; }, data::Normalize({1}, {1})});
  CHECK(bitwise_equal(own(two), hg::from_vector<float>({1, 3, 5, 7}, {2, 1, 2})));
}

TEST_CASE("datasets.transforms.example_random_is_a_pure_function_of_seed_and_stream") {
  data::ExampleRandom a(7, 3), b(7, 3), c(7, 4);
  const double first = a.uniform();
  CHECK(first == b.uniform());
  CHECK(first != c.uniform());
  CHECK(first >= 0);
  CHECK(first < 1);
  for (int k = 0; k < 100; ++k) {
    const int64_t i = a.integer(-2, 3);
    CHECK(i >= -2);
    CHECK(i < 3);
  }
  CHECK_THROWS_HG(a.integer(3, 3), "empty range");
}

// ---- CIFAR10 -------------------------------------------------------------------------------------

namespace {

// n records: label (k * 3) % 10, pixel p of record k = (k + p) % 256.
std::string cifar_records(int n, int first = 0) {
  std::string bytes;
  for (int k = first; k < first + n; ++k) {
    bytes += char((k * 3) % 10);
    for (int p = 0; p < 3072; ++p) bytes += char((k + p) % 256);
  }
  return bytes;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = hg_test::temp_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("datasets.cifar10.reads_the_binary_format") {
  const std::string root = fresh_dir("cifar_test");
  write_file(root + "/test_batch.bin", cifar_records(5));
  const data::CIFAR10 test(root, {.train = false});
  CHECK(test.size() == 5);
  CHECK(test.images().dtype() == hg::u8);
  const data::Example e = test.get(2);
  CHECK(e.x.shape() == hg::Shape{3, 32, 32});
  CHECK(e.x.dtype() == hg::f32);
  CHECK(e.y.item<int64_t>() == 6);
  const std::vector<float> pixels = e.x.to_vector<float>();
  CHECK(pixels[0] == 2.0f / 255);
  CHECK(pixels[1024] == float((2 + 1024) % 256) / 255);  // the green plane
  const auto batch = test.get_batch({4, 2});
  REQUIRE(batch.has_value());
  CHECK(bitwise_equal(batch->x, data::stack_examples({test.get(4), test.get(2)}).x));
  CHECK(batch->y.to_vector<int64_t>() == std::vector<int64_t>{2, 6});

  // The training set: five files, in the archive's folder.
  const std::string archive = fresh_dir("cifar_train");
  std::filesystem::create_directories(archive + "/cifar-10-batches-bin");
  for (int i = 1; i <= 5; ++i)
    write_file(archive + "/cifar-10-batches-bin/data_batch_" + std::to_string(i) + ".bin", cifar_records(2, 2 * (i - 1)));
  const data::CIFAR10 train(archive);
  CHECK(train.size() == 10);
  CHECK(train.labels().to_vector<int64_t>() == std::vector<int64_t>{0, 3, 6, 9, 2, 5, 8, 1, 4, 7});
  data::DataLoader loader(train, {.batch_size = 4, .transform = data::RandomCrop(32, {.padding = 4})});
  for (auto [x, y] : loader) CHECK(x.shape()[1] == 3);
}

TEST_CASE("datasets.cifar10.bad_files_are_errors") {
  const std::string root = fresh_dir("cifar_bad");
  CHECK_THROWS_HG(data::CIFAR10(root, {.train = false}), "cannot find test_batch.bin");
  CHECK_THROWS_HG(data::CIFAR10{root}, "data_batch_1.bin");
  write_file(root + "/test_batch.bin", cifar_records(2).substr(0, 3073 + 100));
  CHECK_THROWS_HG(data::CIFAR10(root, {.train = false}), "not a whole number of 3073-byte records");
  write_file(root + "/test_batch.bin", "");
  CHECK_THROWS_HG(data::CIFAR10(root, {.train = false}), "0 bytes");
  std::string bad_label = cifar_records(3);
  bad_label[3073] = char(10);
  write_file(root + "/test_batch.bin", bad_label);
  CHECK_THROWS_HG(data::CIFAR10(root, {.train = false}), "record 1 has label 10");
  std::filesystem::remove(root + "/test_batch.bin");
  std::filesystem::create_directories(root + "/test_batch.bin");
  CHECK_THROWS_AS(data::CIFAR10(root, {.train = false}), hg::Error);  // a directory, not a file
}

// ---- read_csv ------------------------------------------------------------------------------------

TEST_CASE("datasets.read_csv.numbers_into_a_tensor_dataset") {
  const std::string path = hg_test::temp_path("iris_like.csv");
  write_file(path, "sepal,petal,class\n5.1,1.4,0\n\n4.9,-1e-3,2\r\n6.0,2.5,1\n");
  const data::TensorDataset ds = data::read_csv(path, {.header = true});
  CHECK(ds.x().dtype() == hg::f32);
  CHECK(ds.x().shape() == hg::Shape{3, 2});
  CHECK(ds.x().to_vector<float>() == std::vector<float>{5.1f, 1.4f, 4.9f, -1e-3f, 6.0f, 2.5f});
  CHECK(ds.y().dtype() == hg::i64);
  CHECK(ds.y().to_vector<int64_t>() == std::vector<int64_t>{0, 2, 1});

  // The target first, a regression target, another delimiter.
  write_file(path, "0.5;1;2\n1.5;3;4\n");
  const data::TensorDataset reg = data::read_csv(path, {.target_column = 0, .delimiter = ';', .target_dtype = hg::f64});
  CHECK(reg.y().to_vector<double>() == std::vector<double>{0.5, 1.5});
  CHECK(reg.x().to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  data::DataLoader loader(reg, {.batch_size = 2, .shuffle = false});
  for (auto [x, y] : loader) CHECK(x.shape() == hg::Shape{2, 2});
}

TEST_CASE("datasets.read_csv.every_defect_names_line_and_column") {
  const std::string path = hg_test::temp_path("bad.csv");
  auto fails = [&](const std::string& text, const std::string& needle, data::CsvOptions options = {}) {
    write_file(path, text);
    INFO(text);
    CHECK_THROWS_HG(data::read_csv(path, options), needle.c_str());
  };
  fails("1,2,0\n3,4\n", "line 2 has 2 fields");
  fails("1,2,0\n3,x,1\n", "line 2");
  fails("1,,0\n", "line 1");
  fails("1,2,0.5\n", "whole number");
  fails("1,2,nan\n", "line 1");
  fails("", "no rows");
  fails("a,b\n", "no rows of data after the header", {.header = true});
  fails("1\n2\n", "at least one input");
  fails("1,2\n", "target_column 5", {.target_column = 5});
  fails("1,2\n", "target_dtype", {.target_dtype = hg::f16});
  CHECK_THROWS_HG(data::read_csv(hg_test::temp_path("no_such.csv")), "no_such.csv");
}
