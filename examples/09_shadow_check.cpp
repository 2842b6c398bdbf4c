// Lesson 9: where does a mixed-precision step lose accuracy? A shadow-f32 check of one CNN step.
//
// hg::amp::ShadowCheck runs the forward twice: under autocast, and in f32 with every op fed the
// very inputs its autocast run saw. Each op's row then says how far its 16-bit output was from
// f32 -- in epsilons of the 16-bit format (f16: 2^-10, bf16: 2^-7), so 0.5 means "one correct
// rounding" -- and how many outputs overflowed to inf or flushed to 0. compare_step does the same
// for a whole training step's gradients, parameter by parameter.
//
//   1. one CNN forward on a Fashion-MNIST batch, shadow-checked in f16 and in bf16;
//   2. the step's gradients under f16 (loss x 65536, as a GradScaler would) and bf16 vs f32;
//   3. one op moved to f32 with hg::amp::set_policy: what its row and the gradients then say.
//
// With --csv DIR it also writes the tables (scripts/figures.sh plots them).
#include <cstring>
#include <iomanip>
#include <iostream>

#include "halfgrad.h"
#include "lesson_data.h"

namespace {

using Row = hg::amp::PrecisionReport::Row;

hg::nn::Sequential make_cnn() {
  using namespace hg::nn;
  return Sequential(Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2),   // (B, 16, 14, 14)
                    Conv2d(16, 32, 3, {.padding = 1}), ReLU(), MaxPool2d(2),  // (B, 32, 7, 7)
                    Flatten(), Linear(32 * 7 * 7, 10));                       // (B, 10)
}

const Row* find_row(const hg::amp::ShadowCheck& check, const std::string& op) {
  for (const Row& r : check.report().rows())
    if (r.op == op && r.has_shadow) return &r;
  return nullptr;
}

struct Lesson {
  hg::nn::Sequential model = (hg::manual_seed(0), make_cnn());
  hg::Tensor x, y;
  std::string csv_dir;

  hg::Tensor loss() { return hg::cross_entropy(model(x), y); }

  void shadow(hg::amp::ShadowCheck& check, hg::DType dtype, const char* title) {
    check.run([&] { return loss(); }, model.buffers());
    std::cout << title << "\n";
    check.print(std::cout);
    std::cout << "\n";
    if (!csv_dir.empty()) check.write_csv(csv_dir + "/shadow_" + std::string(hg::dtype_name(dtype)) + ".csv");
  }

  hg::amp::StepComparison step(hg::DType dtype, double scale, const std::string& csv_name) {
    const hg::amp::StepComparison c =
        hg::amp::compare_step(dtype, model.named_parameters(), [&] { return loss(); }, {.loss_scale = scale});
    c.print(std::cout);
    std::cout << "\n";
    if (!csv_dir.empty()) c.write_csv(csv_dir + "/" + csv_name);
    return c;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson;
  if (argc == 3 && std::strcmp(argv[1], "--csv") == 0) lesson.csv_dir = argv[2];
  const std::optional<std::string> root = fashion_mnist_root();
  if (!root) return 0;
  hg::data::DataLoader loader(hg::data::FashionMNIST(*root, {.train = true}).head(64), {.batch_size = 64, .shuffle = false});
  const hg::data::Batch batch = *loader.begin();
  lesson.x = batch.x;
  lesson.y = batch.y;
  std::cout << std::setprecision(4);

  // 1. The forward, op by op.
  hg::amp::ShadowCheck f16(hg::f16), bf16(hg::bf16), moved(hg::bf16);
  lesson.shadow(f16, hg::f16, "1a. one CNN forward (batch 64) under f16 autocast vs f32");
  lesson.shadow(bf16, hg::bf16, "1b. the same forward under bf16 autocast vs f32");
  std::cout << "Reading it: the GEMM ops (conv2d, linear) carry the error: their inputs are rounded to 16 bits\n"
            << "and their outputs too. In epsilons of its own format f16 and bf16 do about equally well -- but a\n"
            << "bf16 epsilon is 8x an f16 one. cross_entropy computes in f32 on what it receives: 0. relu and\n"
            << "max_pool2d only pick values: 0.\n\n";

  // 2. Whole steps.
  std::cout << "2a. ";
  const hg::amp::StepComparison step16 = lesson.step(hg::f16, 65536, "step_f16.csv");
  std::cout << "2b. ";
  const hg::amp::StepComparison step_bf16 = lesson.step(hg::bf16, 1, "step_bf16.csv");

  // 3. One op moved to f32: the linear layer (the logits) computes in f32 under bf16 autocast.
  hg::amp::set_policy("linear", hg::amp::CastPolicy::F32);
  lesson.csv_dir.clear();  // (3a's table is not a figure)
  lesson.shadow(moved, hg::bf16, "3a. bf16 autocast with set_policy(\"linear\", CastPolicy::F32)");
  std::cout << "3b. ";
  const hg::amp::StepComparison step_moved = lesson.step(hg::bf16, 1, "step_bf16_linear_f32.csv");
  hg::amp::set_policy("linear", hg::amp::CastPolicy::Lower);
  std::cout << "The linear row now computes in f32 (error 0 on its inputs); its weight gradient's error went from "
            << step_bf16.parameters[4].norm_error << " to " << step_moved.parameters[4].norm_error
            << " epsilons. The convolutions still run in bf16 -- the cost of the move is one GEMM in f32.\n";

  // The lesson checks its own claims.
  const Row* linear16 = find_row(f16, "linear");
  const Row* linear_bf16 = find_row(bf16, "linear");
  const Row* linear_moved = find_row(moved, "linear");
  const Row* loss_row = find_row(bf16, "cross_entropy");
  const bool ok = linear16 && linear_bf16 && linear_moved && loss_row && linear16->shadow.max_error > 0 &&
                  linear_bf16->shadow.max_error > 0 && linear_moved->compute == hg::f32 &&
                  linear_moved->shadow.max_error == 0 && loss_row->shadow.max_error == 0 &&
                  step_moved.parameters[4].norm_error < step_bf16.parameters[4].norm_error &&
                  step16.parameters[4].flushed_to_zero == 0;
  std::cout << (ok ? "shadow_check: all checks passed\n" : "shadow_check: CHECK FAILED\n");
  return ok ? 0 : 1;
}
