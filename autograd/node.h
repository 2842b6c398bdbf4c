// The autograd graph. Every tensor produced by a recorded op holds a Node (its grad_fn); a Node
// holds edges to the nodes of its inputs and a backward closure written right under the op's
// forward (see ops/activation.cpp). Leaves that require grad end in an AccumulateGrad node.
//
//   Tensor out = ...forward...;
//   autograd::record("mul", out, {a, b}, [sa = SavedTensor(a, "mul"), sb = SavedTensor(b, "mul")]
//                    (const Tensor& g) -> std::vector<Tensor> { return {g * sb.get(), g * sa.get()}; });
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace hg::autograd {

namespace detail {
struct CreationTrace;  // autograd/anomaly.h
}

// A tensor kept for backward: an alias of its data without autograd history (so saving an op's
// own output makes no reference cycle) plus the data's version at save time. get() throws if
// the data was modified in place since, naming the op that saved it.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, std::string_view op);
  Tensor get() const;
  bool defined() const { return alias_.defined(); }

 private:
  Tensor alias_;
  uint64_t version_ = 0;
  std::string_view op_;
};

class Node {
 public:
  // Maps the gradient of the op's output to one gradient per input (undefined = none).
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

  Node(std::string name, std::vector<std::shared_ptr<Node>> next, Backward backward, const Tensor& output);
  // Frees the nodes only this one keeps alive iteratively, not recursively (see node.cpp).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  // One entry per input of the op: the input's node, or null when it needs no gradient.
  const std::vector<std::shared_ptr<Node>>& next() const { return next_; }
  const Shape& output_shape() const { return output_shape_; }
  DType output_dtype() const { return output_dtype_; }

  virtual std::vector<Tensor> apply(const Tensor& grad_output);
  // Frees the closure and the tensors it saved; a later apply() is an hg::Error.
  void release() {
    backward_ = nullptr;
    released_ = true;
  }
  bool released() const { return released_; }

  // Where the op was created, when it was recorded in anomaly mode (else null).
  const detail::CreationTrace* creation_trace() const { return trace_.get(); }
  void set_creation_trace(std::shared_ptr<const detail::CreationTrace> trace) { trace_ = std::move(trace); }

 private:
  std::string name_;
  std::vector<std::shared_ptr<Node>> next_;
  Backward backward_;
  Shape output_shape_;
  DType output_dtype_;
  bool released_ = false;
  std::shared_ptr<const detail::CreationTrace> trace_;
};

// The sink of a leaf that requires grad: adds the incoming gradient into leaf.grad(), then runs
// the leaf's post-accumulate-grad hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and some input requires grad: the op must record itself.
bool needs_grad(const std::vector<Tensor>& inputs);
// The node a gradient for `t` flows into: its grad_fn, a leaf's AccumulateGrad, or null.
std::shared_ptr<Node> gradient_edge(const Tensor& t);
// Watching op outputs (amp::ShadowCheck pairs each op's output with its f32 re-run's): while an
// observer is installed on this thread, record() first hands it every op's name and output,
// whether or not the op needs grad. One pointer test per op when none is installed.
class OutputObserver {
 public:
  virtual ~OutputObserver() = default;
  virtual void on_output(std::string_view op, const Tensor& output) = 0;
};
OutputObserver* set_output_observer(OutputObserver* observer);  // returns the previous one

// Attaches `output` to the graph when needs_grad(inputs); otherwise does nothing.
void record(std::string name, Tensor& output, const std::vector<Tensor>& inputs, Node::Backward backward);

// Runs backward from `root` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad);

// Runs `callback` when the backward now running has finished, after every gradient was
// accumulated (PyTorch's queue_callback): a post-accumulate-grad hook uses it to act once per
// backward, as DataParallel does to wait for its last all-reduces. Callbacks run in the order
// queued, still inside backward (their exceptions leave backward). Valid only during a backward.
void queue_callback(std::function<void()> callback);

}  // namespace hg::autograd
