// autograd::checkpoint (see checkpoint.h): one node whose backward re-runs the function.
#include "ops/checkpoint.h"

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/rng.h"

namespace hg::autograd {

namespace {

// The node's name in the graph (anomaly reports, errors). Not an op-table row: checkpoint casts
// nothing and computes nothing itself -- its node is named like a custom Function's.
constexpr const char* kNodeName = "checkpoint";

// fn's inputs, cut from the graph outside: the ones that need a gradient become leaves of the
// recomputed graph, whose .grad() the node then returns.
std::vector<Tensor> fresh_leaves(const std::vector<Tensor>& inputs, const std::vector<bool>& needs_grad) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      leaves.push_back(inputs[i]);
      continue;
    }
    Tensor leaf = inputs[i].detach();
    if (needs_grad[i]) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  return leaves;
}

// Turns grad mode on for its lifetime (a backward runs its nodes with it off).
class GradEnabled {
 public:
  GradEnabled() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~GradEnabled() { GradMode::set_enabled(previous_); }
  GradEnabled(const GradEnabled&) = delete;
  GradEnabled& operator=(const GradEnabled&) = delete;

 private:
  bool previous_;
};

}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  HG_CHECK(static_cast<bool>(fn), "checkpoint: expected a function");
  if (!GradMode::is_enabled()) return fn(inputs);
  const random::GeneratorState rng = random::get_state();
  const bool autocast_enabled = amp::is_enabled();
  const DType autocast_dtype = amp::autocast_dtype();

  // The first run records its graph only to learn whether anything in it -- an input or a
  // captured parameter -- needs a gradient; the graph (with the activations it holds) is freed
  // when `first` goes out of scope, and only the output's values are kept.
  // Which inputs need a gradient, kept apart: a saved tensor comes back without its autograd state.
  std::vector<bool> input_needs_grad;
  for (const Tensor& t : inputs) input_needs_grad.push_back(t.defined() && t.requires_grad());
  Tensor out;
  bool needs_grad = false;
  {
    const Tensor first = fn(fresh_leaves(inputs, input_needs_grad));
    HG_CHECK(first.defined(), "checkpoint: the function returned an undefined tensor");
    needs_grad = first.requires_grad();
    out = first.detach();
  }
  if (!needs_grad) return out;

  // The node's inputs: fn's, plus an empty leaf that puts the node on the graph when only
  // captured parameters need gradients (no input does).
  std::vector<Tensor> node_inputs = inputs;
  node_inputs.push_back(zeros({0}, {.requires_grad = true}));
  std::vector<SavedTensor> saved;
  for (const Tensor& t : inputs) saved.emplace_back(t);
  record(kNodeName, out, node_inputs,
         [fn, saved = std::move(saved), input_needs_grad, rng, autocast_enabled, autocast_dtype](const Tensor& grad) {
           std::vector<Tensor> originals;
           for (const SavedTensor& s : saved) originals.push_back(s.get());
           std::vector<Tensor> leaves = fresh_leaves(originals, input_needs_grad);
           Tensor again;
           {
             // The generator as the first run found it (dropout's masks), then as it was.
             const random::GeneratorState now = random::get_state();
             random::set_state(rng);
             GradEnabled grad_on;
             amp::Autocast as_in_forward(autocast_dtype, autocast_enabled);
             again = fn(leaves);
             random::set_state(now);
           }
           // Gradients flow into the leaves above and into what fn captured (parameters).
           if (again.requires_grad()) again.backward(grad);
           std::vector<Tensor> grads;
           for (const Tensor& leaf : leaves) grads.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad() : Tensor());
           grads.push_back(zeros({0}));  // the empty anchor's (a leaf accumulates what it gets)
           return grads;
         });
  return out;
}

}  // namespace hg::autograd
