// Lesson 16: AMP recipes and debugging -- what to do when the training loop is more than
// forward, backward, step; how to find the op that breaks a mixed-precision run; and where
// mixed precision's memory saving does and does not apply.
//
//   1. gradient clipping: after scaler.unscale_(opt), and what clipping the scaled gradients does;
//   2. gradient accumulation over k micro-batches with one GradScaler: the big batch's gradient;
//   3. two losses and two optimizers sharing one scaler (PyTorch's documented recipe);
//   4. autocast for inference: no graph, no scaler, and what changes in the predictions;
//   5. hunting a broken op: a forward overflow (shadow check, then set_policy), a NaN born in
//      backward (anomaly mode: hg::autograd::DetectAnomalyGuard, hg-train --detect-anomaly);
//   6. memory end to end: the step's peak halves, the process's peak does not, and the largest
//      batch a fixed budget holds -- where the 2x applies.
// Synthetic data only (Gaussian clusters; random pixels for the memory part): it runs in seconds
// and checks its own numbers (exit 1 when one is off). With --csv DIR it writes every number it
// checks to DIR/lesson16.csv (scripts/figures.sh puts them into docs/amp.md section 9).
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "lesson_csv.h"  // --csv DIR: the numbers checked, for the docs
#include "train/memory_parts.h"  // the bytes by part, as hg-train --compare measures them

namespace {

using hg::Tensor;

int failures = 0;
std::map<std::string, double> numbers;  // what --csv writes: every number the docs quote

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cout << "  !! expected: " << what << "\n";
    ++failures;
  }
}

double keep(const std::string& key, double value) {
  numbers[key] = value;
  return value;
}

// ---- the synthetic task and helpers -----------------------------------------------------------

// 10 Gaussian clusters in 32 dimensions; `gain` multiplies the features (gain 30: inputs nobody
// normalised, like raw 0..255 pixels).
struct Task {
  Tensor x, y;  // (N, 32) f32, (N) i64
};

Task make_task(int64_t n, uint64_t seed, double gain = 1.0) {
  hg::manual_seed(16);
  const Tensor centres = hg::randn({10, 32}) * 0.5;  // the same clusters for every seed
  hg::manual_seed(seed);
  Task t;
  t.y = hg::randint(0, 10, {n}, {.dtype = hg::i64});
  t.x = (hg::index_select(centres, 0, t.y) + hg::randn({n, 32})) * gain;
  return t;
}

hg::nn::Sequential make_mlp(uint64_t seed, int64_t hidden = 64) {
  hg::manual_seed(seed);
  using namespace hg::nn;
  return Sequential{Linear(32, hidden), ReLU(), Linear(hidden, 10)};
}

Tensor rows(const Tensor& t, int64_t start, int64_t count) { return hg::narrow(t, 0, start, count); }

// Every gradient (or parameter) of a list as one f64 vector.
std::vector<double> flat(const std::vector<Tensor>& tensors, bool gradients) {
  std::vector<double> out;
  for (const Tensor& p : tensors) {
    const std::vector<double> v = (gradients ? p.grad() : p).to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double norm(const std::vector<double>& a) {
  double s = 0;
  for (double v : a) s += v * v;
  return std::sqrt(s);
}

// ||a - b|| / ||b||
double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(d) / norm(b);
}

std::string number(double v) {
  std::ostringstream os;
  if (std::isnan(v)) os << "NaN";
  else os << std::setprecision(4) << v;
  return os.str();
}

std::string log2_text(double scale) { return "2^" + std::to_string(int(std::lround(std::log2(scale)))); }

// ---- 1. clipping ---------------------------------------------------------------------------------

struct ClipRun {
  double norm_seen = 0, norm_applied = 0, loss_start = 0, loss_end = 0;
};

// f16 autocast + GradScaler at 2^16, SGD; clip_grad_norm_(max_norm) after unscale_ or before it.
ClipRun clip_run(const Task& task, bool unscale_first, double max_norm, int steps) {
  hg::nn::Sequential model = make_mlp(1);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::amp::GradScaler scaler({.growth_interval = 1'000'000});  // 2^16 throughout
  ClipRun run;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);
      loss = hg::cross_entropy(model(task.x), task.y);
    }
    scaler.scale(loss).backward();
    if (unscale_first) scaler.unscale_(opt);  // the gradients are now the true ones
    const double seen = hg::nn::utils::clip_grad_norm_(model.parameters(), max_norm);
    scaler.step(opt);  // unscales the gradients in place (unless unscale_ did): .grad() is what SGD applied
    scaler.update();
    if (step == 0) {
      run.norm_seen = seen;
      run.norm_applied = norm(flat(model.parameters(), true));
      run.loss_start = loss.item<double>();
    }
    run.loss_end = loss.item<double>();
  }
  return run;
}

void clipping(const Task& task) {
  constexpr double kMaxNorm = 0.5;
  constexpr int kSteps = 60;
  std::cout << "1. Clipping at max_norm " << kMaxNorm << ": MLP 32-64-10, f16 autocast, GradScaler at 2^16, SGD lr 0.1, "
            << kSteps << " steps\n"
            << "   recipe                          norm clip_grad_norm_ saw  gradient norm applied  loss: step 0 -> last\n";
  const ClipRun right = clip_run(task, true, kMaxNorm, kSteps);
  const ClipRun wrong = clip_run(task, false, kMaxNorm, kSteps);
  for (const auto& [name, r] : {std::pair{"unscale_, then clip (right)", &right}, std::pair{"clip the scaled gradients", &wrong}})
    std::cout << "   " << std::left << std::setw(31) << name << std::right << std::setw(26) << std::setprecision(5)
              << r->norm_seen << std::setw(23) << std::setprecision(3) << r->norm_applied << "  " << std::setprecision(4)
              << r->loss_start << " -> " << r->loss_end << "\n";
  const double ratio = right.norm_applied / wrong.norm_applied;
  std::cout << std::setprecision(6) << "   Without unscale_ the clip sees the gradients x 65536 (" << wrong.norm_seen / right.norm_seen
            << "x), clips them to " << kMaxNorm << ",\n   and step() then divides by 65536: the applied gradient is "
            << std::setprecision(3) << wrong.norm_applied << ", " << std::fixed << std::setprecision(0) << ratio
            << std::defaultfloat << "x smaller than the clip meant.\n   SGD barely moves. (Adam divides by its own running RMS and hides much\n"
            << "   of this -- but not the per-step weighting the clip was for.)\n\n";
  keep("clip.max_norm", kMaxNorm);
  keep("clip.true_norm", right.norm_seen);
  keep("clip.scaled_norm", wrong.norm_seen);
  keep("clip.applied_right", right.norm_applied);
  keep("clip.applied_wrong", wrong.norm_applied);
  keep("clip.ratio", ratio);
  keep("clip.loss_start", right.loss_start);
  keep("clip.loss_end_right", right.loss_end);
  keep("clip.loss_end_wrong", wrong.loss_end);
  expect(right.norm_seen > kMaxNorm, "the true gradient norm is above max_norm (so both runs clip)");
  expect(std::fabs(wrong.norm_seen / right.norm_seen / 65536 - 1) < 1e-2, "the scaled norm is 65536x the true one");
  expect(std::fabs(ratio / 65536 - 1) < 1e-3, "clipping the scaled gradients applies a 65536x smaller gradient");
  expect(right.loss_end < 0.5 * right.loss_start && wrong.loss_end > 0.99 * wrong.loss_start,
         "clipping after unscale_ trains; clipping before it barely moves the loss");
}

// ---- 2. gradient accumulation ---------------------------------------------------------------------

// The gradient of one big batch, or of k micro-batches accumulated (each loss / k, or not).
std::vector<double> batch_gradient(const Task& task, int k, bool f16, bool divide = true, int64_t* tracker = nullptr) {
  hg::nn::Sequential model = make_mlp(2);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::amp::GradScaler scaler({.enabled = f16});
  const int64_t n = task.x.shape()[0], micro = n / k;
  opt.zero_grad();
  for (int i = 0; i < k; ++i) {
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16, f16);
      loss = hg::cross_entropy(model(rows(task.x, i * micro, micro)), rows(task.y, i * micro, micro));
    }
    scaler.scale(divide ? loss / double(k) : loss).backward();  // gradients add up in .grad()
  }
  scaler.unscale_(opt);  // once, after the last micro-batch
  const std::vector<double> g = flat(model.parameters(), true);
  scaler.step(opt);
  scaler.update();  // once per optimizer step, not per micro-batch
  if (tracker) *tracker = scaler.growth_tracker();
  return g;
}

void accumulation(const Task& task) {
  constexpr int kMicro = 4;
  std::cout << "2. Gradient accumulation: a batch of 128 as " << kMicro << " micro-batches of 32, one GradScaler\n";
  const std::vector<double> big = batch_gradient(task, 1, false);
  const double f32_accumulated = relative_difference(batch_gradient(task, kMicro, false), big);
  int64_t tracker = 0;
  const double f16_accumulated = relative_difference(batch_gradient(task, kMicro, true, true, &tracker), big);
  const double f16_big = relative_difference(batch_gradient(task, 1, true), big);
  const double undivided = norm(batch_gradient(task, kMicro, false, false)) / norm(big);
  std::cout << std::setprecision(3) << "   gradient against the f32 big batch's, ||g - g_big|| / ||g_big||:\n"
            << "     f32, 4 micro-batches, each loss / 4              " << f32_accumulated << "   (summation order only)\n"
            << "     f16 autocast + scaler, 4 micro-batches, loss / 4 " << f16_accumulated << "\n"
            << "     f16 autocast + scaler, the big batch at once     " << f16_big << "   (f16's own error)\n"
            << "   Forgetting the / 4 gives a gradient " << undivided << "x the big batch's. The scaler counted "
            << tracker << " clean step (growth_tracker), not " << kMicro << ":\n"
            << "   scale(loss / k).backward() per micro-batch; unscale_, step and update once.\n\n";
  keep("accum.micro_batches", kMicro);
  keep("accum.f32_difference", f32_accumulated);
  keep("accum.f16_difference", f16_accumulated);
  keep("accum.f16_big_difference", f16_big);
  keep("accum.undivided_ratio", undivided);
  expect(f32_accumulated < 1e-6, "f32 accumulation equals the big batch's gradient to rounding");
  expect(f16_accumulated < 2 * f16_big + 1e-4, "f16 accumulation is as close to f32 as the f16 big batch is");
  expect(std::fabs(undivided - kMicro) < 1e-3, "without / k the gradient is k times too large");
  expect(tracker == 1, "the scaler counts one step per accumulation");
}

// ---- 3. two losses, two optimizers, one scaler ------------------------------------------------------

struct TwoModels {
  hg::nn::Sequential model0 = make_mlp(3), model1 = make_mlp(4);
  hg::optim::SGD opt0{model0.parameters(), {.lr = 0.05}}, opt1{model1.parameters(), {.lr = 0.05}};

  // PyTorch's example: each loss depends on both models' outputs.
  std::pair<Tensor, Tensor> losses(const Task& task, bool f16) {
    hg::amp::Autocast autocast(hg::f16, f16);
    const Tensor out0 = model0(task.x), out1 = model1(task.x);
    return {hg::cross_entropy(out0 * 2.0 + out1 * 3.0, task.y), hg::cross_entropy(out0 * 3.0 - out1 * 5.0, task.y)};
  }
  std::vector<double> parameters() {
    std::vector<double> p = flat(model0.parameters(), false), p1 = flat(model1.parameters(), false);
    p.insert(p.end(), p1.begin(), p1.end());
    return p;
  }
};

void two_optimizers(const Task& task) {
  constexpr int kSteps = 30;
  std::cout << "3. Two losses, two optimizers, one GradScaler (each loss uses both models' outputs)\n";
  TwoModels amp, control;
  hg::amp::GradScaler scaler;
  int applied0 = 0, applied1 = 0;
  for (int step = 0; step < kSteps; ++step) {
    amp.opt0.zero_grad(), amp.opt1.zero_grad();
    const auto [loss0, loss1] = amp.losses(task, true);
    // PyTorch: scaler.scale(loss0).backward(retain_graph=True); scaler.scale(loss1).backward().
    // halfgrad frees the graph in backward: one backward of the sum is the same gradients.
    (scaler.scale(loss0) + scaler.scale(loss1)).backward();
    applied0 += scaler.step(amp.opt0).applied;  // each optimizer is unscaled and checked on its own
    applied1 += scaler.step(amp.opt1).applied;
    scaler.update();  // once, from both optimizers' flags
    control.opt0.zero_grad(), control.opt1.zero_grad();
    const auto [c0, c1] = control.losses(task, false);
    (c0 + c1).backward();
    control.opt0.step(), control.opt1.step();
  }
  const double difference = relative_difference(amp.parameters(), control.parameters());
  // One step with an inf injected into model 1's gradient: optimizer 0 still steps.
  amp.opt0.zero_grad(), amp.opt1.zero_grad();
  const auto [loss0, loss1] = amp.losses(task, true);
  (scaler.scale(loss0) + scaler.scale(loss1)).backward();
  hg::narrow(amp.model1.parameters()[0].grad(), 0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  const double scale_before = scaler.get_scale();
  const hg::amp::StepResult r0 = scaler.step(amp.opt0), r1 = scaler.step(amp.opt1);
  scaler.update();
  std::cout << std::setprecision(3) << "   after " << kSteps << " steps the weights differ from an f32 run's by "
            << difference << " (relative: f16's rounding, compounded)\n"
            << "   optimizer 0 applied " << applied0 << " of " << kSteps << " steps, optimizer 1 " << applied1
            << "; the scale went 2^16 -> " << log2_text(scale_before) << "\n"
            << "   a step with inf in model 1's gradient: optimizer 0 applied: " << (r0.applied ? "yes" : "no")
            << ", optimizer 1 applied: " << (r1.applied ? "yes" : "no") << "; scale " << log2_text(scale_before) << " -> "
            << log2_text(scaler.get_scale()) << " (one update, one backoff)\n"
            << "   As in PyTorch each optimizer decides to skip on its own gradients; update() backs off once.\n\n";
  keep("two.steps", kSteps);
  keep("two.difference", difference);
  keep("two.applied0", applied0);
  keep("two.applied1", applied1);
  keep("two.scale_log2", std::log2(scale_before));
  keep("two.scale_after_inf_log2", std::log2(scaler.get_scale()));
  expect(difference < 0.05, "two optimizers under one scaler track the f32 run");
  expect(r0.applied && !r1.applied && scaler.get_scale() == scale_before / 2,
         "inf in model 1's gradient skips optimizer 1 only; the scale halves once");
}

// ---- 4. autocast for inference ------------------------------------------------------------------------

struct Inference {
  std::vector<int64_t> predicted;
  std::vector<float> logits;
  int64_t peak_bytes = 0;
  bool has_graph = false;
};

Inference infer(hg::nn::Sequential& model, const Tensor& x, hg::DType dtype) {
  hg::NoGradGuard no_grad;  // no graph: nothing saved for a backward
  const int64_t before = hg::memory::allocated();
  hg::memory::reset_peak();
  Tensor logits;
  {
    hg::amp::Autocast autocast(dtype, dtype != hg::f32);
    logits = model(x);
  }
  Inference r;
  r.peak_bytes = hg::memory::peak_allocated() - before;
  r.has_graph = logits.requires_grad();
  r.predicted = hg::argmax(logits, 1).to_vector<int64_t>();
  r.logits = logits.to(hg::f32).to_vector<float>();
  return r;
}

void inference(const Task& train, const Task& test) {
  std::cout << "4. Autocast for inference: NoGradGuard + Autocast, no GradScaler (no gradients to scale)\n";
  hg::nn::Sequential model = make_mlp(5, 512);
  hg::optim::Adam opt(model.parameters(), {.lr = 3e-3});
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    hg::cross_entropy(model(rows(train.x, 128 * (step % 16), 128)), rows(train.y, 128 * (step % 16), 128)).backward();
    opt.step();
  }
  const std::vector<int64_t> truth = test.y.to_vector<int64_t>();
  const Inference f32 = infer(model, test.x, hg::f32);
  std::cout << "   " << test.x.shape()[0] << " test samples, MLP 32-512-10 (trained in f32)\n"
            << "   precision  accuracy  same prediction as f32  max |logit - f32's|  peak memory of the forward\n";
  const int64_t before = hg::memory::allocated();
  for (const hg::DType dtype : {hg::f32, hg::bf16, hg::f16}) {
    const Inference r = infer(model, test.x, dtype);
    int64_t correct = 0, same = 0;
    double max_diff = 0;
    for (size_t i = 0; i < truth.size(); ++i) correct += r.predicted[i] == truth[i], same += r.predicted[i] == f32.predicted[i];
    for (size_t i = 0; i < r.logits.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(r.logits[i] - f32.logits[i])));
    const std::string name(hg::dtype_name(dtype));
    const double accuracy = 100.0 * double(correct) / double(truth.size()), agree = 100.0 * double(same) / double(truth.size());
    std::cout << "   " << std::left << std::setw(9) << name << std::right << std::fixed << std::setprecision(2) << std::setw(9)
              << accuracy << "%" << std::setw(23) << agree << "%" << std::defaultfloat << std::setprecision(3) << std::setw(21)
              << max_diff << std::setw(21) << std::setprecision(3) << r.peak_bytes / 1048576.0 << " MiB\n";
    keep("infer." + name + ".accuracy", accuracy);
    keep("infer." + name + ".agreement", agree);
    keep("infer." + name + ".max_logit_difference", max_diff);
    keep("infer." + name + ".peak_mib", r.peak_bytes / 1048576.0);
    expect(!r.has_graph, name + ": an inference forward under NoGradGuard records no graph");
    expect(agree > 99.0, name + ": predictions agree with f32's on 99%+ of the samples");
  }
  const int64_t growth = hg::memory::allocated() - before;
  std::cout << "   Memory still held after the three forwards: " << growth
            << " bytes (a cast made under NoGradGuard is never cached). The peak holds the input, its 16-bit\n"
            << "   copy, the cast weights and one layer's output at a time: nothing is saved for a backward.\n\n";
  keep("infer.memory_growth_bytes", double(growth));
  keep("infer.test_samples", double(truth.size()));
  expect(growth == 0, "repeated inference does not grow memory");
  expect(numbers["infer.bf16.peak_mib"] < 0.75 * numbers["infer.f32.peak_mib"], "a bf16 forward peaks lower than f32's");
}

// ---- 5. hunting a broken op -------------------------------------------------------------------------------

// A toy attention layer with the classic bug: scores h h^T without the 1/sqrt(d). On inputs nobody
// normalised (x 60) the scores reach ~10^5: f32 holds them, f16 (max 65504) does not.
struct Attention {
  hg::nn::Linear proj = (hg::manual_seed(7), hg::nn::Linear(32, 64));
  hg::nn::Linear head{64, 10};
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> p = proj.parameters(), h = head.parameters();
    p.insert(p.end(), h.begin(), h.end());
    return p;
  }
  Tensor loss(const Task& task) {
    const Tensor h = hg::relu(proj(task.x));                // (N, 64)
    const Tensor scores = hg::matmul(h, h.t());             // (N, N): the op that overflows f16
    const Tensor mixed = hg::matmul(hg::softmax(scores, 1), h);
    return hg::cross_entropy(head(mixed), task.y);
  }
};

// n steps of f16 autocast + GradScaler: how many applied, the last loss and scale.
struct Steps {
  int applied = 0;
  double first_loss = 0, loss = 0, scale = 0;
};
Steps train_attention(Attention& net, const Task& task, int n) {
  hg::optim::SGD opt(net.parameters(), {.lr = 1e-3});
  hg::amp::GradScaler scaler;
  Steps s;
  for (int step = 0; step < n; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);
      loss = net.loss(task);
    }
    scaler.scale(loss).backward();
    s.applied += scaler.step(opt).applied;
    scaler.update();
    s.loss = loss.item<double>();
    if (step == 0) s.first_loss = s.loss;
  }
  s.scale = scaler.get_scale();
  return s;
}

const hg::amp::PrecisionReport::Row* shadow_row(const hg::amp::ShadowCheck& check, const std::string& op) {
  for (const hg::amp::PrecisionReport::Row& r : check.report().rows())
    if (r.op == op && r.has_shadow) return &r;
  return nullptr;
}

std::string first_sentence(const std::string& message) { return message.substr(0, message.find(". ") + 1); }

void forward_overflow() {
  constexpr double kGain = 60;
  const Task task = make_task(128, 4, kGain);
  std::cout << "5a. A forward overflow: toy attention, scores = h h^T without 1/sqrt(d), inputs x " << kGain << "\n";
  constexpr int kSteps = 20;
  Attention broken;
  const Steps symptom = train_attention(broken, task, kSteps);
  std::cout << "   symptom: f16 + GradScaler, " << kSteps << " steps: " << symptom.applied << " applied, loss " << number(symptom.loss)
            << ", scale 2^16 -> " << log2_text(symptom.scale) << " (its floor). The scaler cannot help: the loss is NaN before\n"
            << "   it is scaled (after 50 skips in a row GradScaler stops the run with an error).\n";
  // Anomaly mode names the first op whose backward made a NaN -- here the loss, downstream of the cause.
  std::string anomaly;
  try {
    hg::autograd::DetectAnomalyGuard detect;
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);
      loss = broken.loss(task);
    }
    loss.backward();
  } catch (const hg::Error& e) {
    anomaly = e.what();
  }
  std::cout << "   anomaly mode says: " << first_sentence(anomaly) << "\n"
            << "   -- true, but the NaN was already in the forward: every op after the overflow carried it.\n"
            << "   The shadow check runs the forward in f16 and in f32 op by op and counts outputs that are inf\n"
            << "   where f32 is finite:\n";
  hg::amp::ShadowCheck check(hg::f16);
  check.run([&] { return broken.loss(task); });
  check.print(std::cout);
  const hg::amp::PrecisionReport::Row* matmul = shadow_row(check, "matmul");
  const int64_t overflows = matmul ? matmul->shadow.overflows : 0;
  std::cout << "   -> the first matmul: " << overflows << " of its " << (matmul ? matmul->shadow.elements : 0)
            << " outputs overflowed. One is enough: softmax makes its row NaN, and the\n"
            << "   NaN reaches the loss through the second matmul. The fix: set_policy(\"matmul\", CastPolicy::F32)\n"
            << "   (or the missing 1/sqrt(d), or bf16, whose range is f32's):\n";
  hg::amp::set_policy("matmul", hg::amp::CastPolicy::F32);
  hg::amp::ShadowCheck fixed_check(hg::f16);
  fixed_check.run([&] { return broken.loss(task); });
  int64_t overflows_after = 0;
  for (const hg::amp::PrecisionReport::Row& r : fixed_check.report().rows()) overflows_after += r.shadow.overflows;
  Attention fixed;
  const Steps after = train_attention(fixed, task, kSteps);
  hg::amp::set_policy("matmul", hg::amp::CastPolicy::Lower);
  std::cout << "   with matmul in f32: " << overflows_after << " overflows in the shadow check; " << kSteps << " steps: "
            << after.applied << " applied (the scaler backs off to " << log2_text(after.scale)
            << " as usual for gradients this large),\n   loss " << number(after.first_loss) << " -> " << number(after.loss) << "\n\n";
  keep("hunt.steps", kSteps);
  keep("hunt.broken_applied", symptom.applied);
  keep("hunt.broken_scale_log2", std::log2(symptom.scale));
  keep("hunt.matmul_overflows", double(overflows));
  keep("hunt.matmul_outputs", matmul ? double(matmul->shadow.elements) : 0);
  keep("hunt.fixed_applied", after.applied);
  keep("hunt.fixed_overflows", double(overflows_after));
  keep("hunt.fixed_loss", after.loss);
  keep("hunt.fixed_first_loss", after.first_loss);
  keep("hunt.fixed_scale_log2", std::log2(after.scale));
  keep("hunt.gain", kGain);
  expect(symptom.applied == 0 && std::isnan(symptom.loss), "the broken model's f16 steps are all skipped, loss NaN");
  expect(anomaly.find("cross_entropy") != std::string::npos, "anomaly mode names the loss, where backward meets the NaN");
  expect(overflows > 0, "the shadow check counts the matmul's overflowed outputs");
  expect(overflows_after == 0 && after.applied >= kSteps / 2 && after.loss < after.first_loss,
         "with matmul in f32 nothing overflows, most steps apply and the loss falls");
}

// A NaN born in backward: the forward is finite, so the shadow check sees nothing; anomaly mode
// names the op. A norm penalty sqrt(sum(h^2)) on a sample whose features are all 0 (padding):
// sqrt's gradient at 0 is inf, and inf x 0 in the square's backward is NaN.
void backward_nan(const Task& task) {
  std::cout << "5b. A NaN born in backward: a penalty 1e-3 * sqrt(sum(h^2)) per sample; one sample is all 0\n";
  hg::manual_seed(8);
  hg::nn::Linear proj(32, 64, /*bias=*/false), head(64, 10);
  Tensor x = task.x.clone();
  rows(x, 0, 1).fill_(0.0);  // a padding row: h = 0 there
  const auto loss_fn = [&] {
    const Tensor h = proj(x);
    const Tensor penalty = hg::mean(hg::sqrt(hg::sum(h * h, {1})));
    return hg::cross_entropy(head(hg::relu(h)), task.y) + penalty * 1e-3;
  };
  const Tensor loss = loss_fn();
  loss.backward();
  const std::vector<double> g = proj.weight.grad().to_vector<double>();
  int64_t nan = 0;
  for (double v : g) nan += std::isnan(v);
  std::cout << "   loss " << loss.item<double>() << " (finite); NaN in " << nan << " of " << g.size()
            << " weight-gradient elements: f32 SGD would write NaN into every weight, f16 + GradScaler would skip every step.\n";
  std::string anomaly;
  try {
    hg::autograd::DetectAnomalyGuard detect;  // hg-train --detect-anomaly turns on the same mode
    loss_fn().backward();
  } catch (const hg::Error& e) {
    anomaly = e.what();
  }
  std::cout << "   anomaly mode says: " << first_sentence(anomaly) << "\n"
            << "   (the full message goes on with the C++ stack of the forward call that created that op).\n\n";
  keep("nan.gradient_nan", double(nan));
  keep("nan.gradient_elements", double(g.size()));
  expect(std::isfinite(loss.item<double>()) && nan > 0, "the loss is finite and the gradient has NaN");
  expect(anomaly.find("'mul'") != std::string::npos, "anomaly mode names the square's mul");
}

// ---- 6. memory: the step, the process, the largest batch -----------------------------------------------------

hg::nn::Sequential make_model(const std::string& name) {
  using namespace hg::nn;
  hg::manual_seed(0);
  if (name == "mlp") return fuse(Sequential{Flatten(), Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10)});
  return fuse(Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, {.padding = 1}), ReLU(),
                         MaxPool2d(2), Flatten(), Linear(32 * 7 * 7, 10)});
}

struct StepMemory {
  int64_t live = 0, saved = 0, step_peak = 0, run_peak = 0;  // bytes
  hg_train::MemoryParts parts;  // the live part by part, and the gradients
};

// hg-train's measurement (examples/train/trainer.cpp): what was live before a step (by part: the
// dataset, weights, optimizer state), what the graph held after the forward, the gradients, the
// most the step allocated above the live part, and the peak of all.
struct MemoryRig {
  const Tensor& images;  // (N, 1, 28, 28) u8: the dataset, held as hg-train holds Fashion-MNIST's
  hg::nn::Sequential model;
  hg::optim::SGD opt;
  hg::DType dtype;
  MemoryRig(const Tensor& data, const std::string& name, hg::DType precision)
      : images(data), model(make_model(name)), opt(model.parameters(), {.lr = 0.05, .momentum = 0.9}), dtype(precision) {
    step(128);  // the momentum buffers exist from the first step on
  }
  StepMemory step(int64_t batch) {
    opt.zero_grad();
    StepMemory m;
    m.parts = hg_train::live_parts(model, opt, {images});
    m.live = m.parts.live_before_step;
    hg::memory::reset_peak();
    const Tensor x = rows(images, 0, batch).to(hg::f32) * (1.0 / 255);
    const Tensor y = hg::zeros({batch}, {.dtype = hg::i64});
    Tensor loss;
    {
      hg::amp::Autocast autocast(dtype, dtype != hg::f32);
      loss = hg::cross_entropy(model(x), y);
    }
    m.saved = hg::memory::allocated() - m.live;
    loss.backward();
    m.parts.gradients = hg_train::gradient_bytes(opt);
    opt.step();
    m.run_peak = hg::memory::peak_allocated();
    m.step_peak = m.run_peak - m.live;
    return m;
  }
};

double mib(int64_t bytes) { return double(bytes) / 1048576.0; }

// The largest batch whose step keeps the process's tensor memory within budget (bisection).
int64_t largest_batch(MemoryRig& rig, int64_t budget, int64_t hi) {
  int64_t lo = 1;  // fits; hi: does not
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (rig.step(mid).run_peak <= budget ? lo : hi) = mid;
  }
  return lo;
}

void memory() {
  std::cout << "6. Memory end to end (hg-train's CNN and MLP, SGD with momentum, batch 128, the 70000 images of\n"
            << "   Fashion-MNIST's size held as u8 like hg-train holds them; bytes of live tensors, hg::memory)\n"
            << "   model  precision  live before the step  saved for backward  step peak  run peak (all of it)\n";
  hg::manual_seed(1);
  const Tensor images = hg::randint(0, 256, {70000, 1, 28, 28}, {.dtype = hg::u8});
  std::map<std::string, StepMemory> at128;
  for (const std::string model : {"cnn", "mlp"})
    for (const hg::DType dtype : {hg::f32, hg::bf16}) {
      MemoryRig rig(images, model, dtype);
      const StepMemory m = rig.step(128);
      const std::string key = model + "." + std::string(hg::dtype_name(dtype));
      at128[key] = m;
      std::cout << "   " << std::left << std::setw(7) << model << std::setw(9) << hg::dtype_name(dtype) << std::right
                << std::fixed << std::setprecision(1) << std::setw(18) << mib(m.live) << " MiB" << std::setw(16)
                << mib(m.saved) << " MiB" << std::setw(7) << mib(m.step_peak) << " MiB" << std::setw(10) << mib(m.run_peak)
                << " MiB\n"
                << std::defaultfloat;
      keep("mem." + key + ".live_mib", mib(m.live));
      keep("mem." + key + ".saved_mib", mib(m.saved));
      keep("mem." + key + ".step_peak_mib", mib(m.step_peak));
      keep("mem." + key + ".run_peak_mib", mib(m.run_peak));
      keep("mem." + key + ".dataset_mib", mib(m.parts.dataset));
      keep("mem." + key + ".weights_mib", mib(m.parts.weights));
      keep("mem." + key + ".optimizer_state_mib", mib(m.parts.optimizer_state));
      keep("mem." + key + ".gradients_mib", mib(m.parts.gradients));
      // The rest of the live part: the earlier parts' synthetic tasks (main's), about 0.8 MiB.
      const int64_t other = m.live - m.parts.dataset - m.parts.weights - m.parts.optimizer_state;
      expect(other >= 0 && other < (1 << 20), key + ": the parts are what was live before the step, within 1 MiB");
    }
  for (const std::string model : {"cnn", "mlp"}) {
    const hg_train::MemoryParts& p = at128[model + ".f32"].parts;
    std::cout << "   " << model << " f32 by part: dataset " << std::fixed << std::setprecision(2) << mib(p.dataset)
              << " MiB, weights " << mib(p.weights) << " MiB, momentum " << mib(p.optimizer_state)
              << " MiB (live before the step); gradients " << mib(p.gradients) << " MiB (made by backward)\n"
              << std::defaultfloat;
  }
  for (const std::string model : {"cnn", "mlp"}) {
    const StepMemory& a = at128[model + ".f32"];
    const StepMemory& b = at128[model + ".bf16"];
    keep("mem." + model + ".step_ratio", double(b.step_peak) / double(a.step_peak));
    keep("mem." + model + ".saved_ratio", double(b.saved) / double(a.saved));
    keep("mem." + model + ".run_ratio", double(b.run_peak) / double(a.run_peak));
  }
  std::cout << std::setprecision(3) << "   bf16 / f32: CNN step peak " << numbers["mem.cnn.step_ratio"] << "x, saved "
            << numbers["mem.cnn.saved_ratio"] << "x, run peak " << numbers["mem.cnn.run_ratio"] << "x; MLP step peak "
            << numbers["mem.mlp.step_ratio"] << "x, saved " << numbers["mem.mlp.saved_ratio"] << "x, run peak "
            << numbers["mem.mlp.run_ratio"] << "x\n";

  // The largest CNN batch under a budget for all of the process's tensor memory.
  constexpr int64_t kBudgetMiB = 96;
  const int64_t budget = kBudgetMiB << 20;
  std::map<std::string, int64_t> largest;
  for (const hg::DType dtype : {hg::f32, hg::bf16}) {
    MemoryRig rig(images, "cnn", dtype);
    largest[std::string(hg::dtype_name(dtype))] = largest_batch(rig, budget, 2048);
  }
  const double ratio = double(largest["bf16"]) / double(largest["f32"]);
  std::cout << "   The largest CNN batch whose step keeps all tensor memory within " << kBudgetMiB << " MiB: f32 "
            << largest["f32"] << ", bf16 " << largest["bf16"] << " (" << ratio << "x).\n"
            << "   The 2x applies to what a step adds per sample (activations): a fixed budget holds about twice the\n"
            << "   batch. It does not apply to the rest -- the data, the f32 weights, their gradients and the momentum:\n"
            << "   at one batch size the process's peak shrinks only by the activations' half. And where the weights\n"
            << "   outweigh the activations (the MLP) even the step does not shrink: its f32 gradients and the\n"
            << "   weights' 16-bit copies are most of it.\n";
  keep("mem.budget_mib", kBudgetMiB);
  keep("mem.largest_batch.f32", double(largest["f32"]));
  keep("mem.largest_batch.bf16", double(largest["bf16"]));
  keep("mem.largest_batch_ratio", ratio);
  expect(numbers["mem.cnn.step_ratio"] < 0.65, "the CNN's step peak shrinks to under 0.65x in bf16");
  expect(numbers["mem.cnn.run_ratio"] > 0.8, "the CNN's run peak shrinks by less than 20% (the live part does not shrink)");
  expect(ratio > 1.6, "a fixed budget holds 1.6x+ the CNN batch in bf16");
  expect(numbers["mem.mlp.step_ratio"] > numbers["mem.cnn.step_ratio"], "the MLP's step shrinks less than the CNN's");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string csv_dir = csv_dir_argument(argc, argv);
  std::cout << "Lesson 16: AMP recipes and debugging (" << hg::cpu::isa_summary() << ")\n\n";
  const Task task = make_task(128, 1), test = make_task(4096, 2), train = make_task(2048, 3);
  clipping(task);
  accumulation(task);
  two_optimizers(task);
  inference(train, test);
  forward_overflow();
  backward_nan(task);
  memory();
  if (!csv_dir.empty()) write_numbers_csv(numbers, csv_dir, "lesson16.csv");
  if (failures > 0) {
    std::cout << "\n" << failures << " expectation(s) not met\n";
    return 1;
  }
  std::cout << "\namp_recipes: all checks passed\n";
  return 0;
}
