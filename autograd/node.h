// The autograd graph. Every tensor produced by a recorded op holds a Node (its grad_fn); a Node
// holds edges to the nodes of its inputs and a backward closure written right under the op's
// forward (see ops/activation.cpp). Leaves that require grad end in an AccumulateGrad node.
//
//   Tensor out = ...forward...;
//   autograd::record("mul", out, {a, b}, [sa = SavedTensor(a), sb = SavedTensor(b)]
//                    (const Tensor& g) -> std::vector<Tensor> { return {g * sb.get(), g * sa.get()}; });
//
// An op with several outputs (a custom Function returning (var, mean)) is one node with one
// slot per output: each output tensor knows its slot (TensorImpl::output_nr), the engine sums
// the gradients arriving at each slot and runs the node's backward once with all of them.
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
// own output makes no reference cycle) plus the data's version at save time. get() throws
// SavedTensorModified if the data was modified in place since; the node whose backward called
// it (Node::apply) turns that into an hg::Error naming the op, so a SavedTensor needs no name.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor get() const;
  bool defined() const { return alias_.defined(); }

 private:
  Tensor alias_;
  uint64_t version_ = 0;
};

struct SavedTensorModified : Error {
  using Error::Error;
};

// Where the gradient of one input goes: the node that produced the input and which of that
// node's outputs the input is (always 0 for single-output ops and leaves). Null node: no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t output_nr = 0;
};

class Node {
 public:
  // Maps the gradient of the op's output to one gradient per input (undefined = none).
  using Backward = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
  // The same for an op with several outputs: one gradient per output in (an output that received
  // none gets zeros of its shape, PyTorch's materialize_grads), one per input out.
  using MultiBackward = std::function<std::vector<Tensor>(std::vector<Tensor> grad_outputs)>;
  struct Output {
    Shape shape;
    DType dtype;
    Device device;
  };

  Node(std::string name, std::vector<Edge> next, Backward backward, const Tensor& output);
  Node(std::string name, std::vector<Edge> next, MultiBackward backward, const std::vector<Tensor>& outputs);
  // Frees the nodes only this one keeps alive iteratively, not recursively (see node.cpp).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  // One entry per input of the op: the input's node (null when it needs no gradient) and slot.
  const std::vector<Edge>& next() const { return next_; }
  size_t num_outputs() const { return outputs_.size(); }
  const Output& output(size_t i) const { return outputs_[i]; }

  // One gradient per output (undefined where none arrived) -> one gradient per input.
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs);
  // Frees the closure and the tensors it saved; a later apply() is an hg::Error.
  void release() {
    backward_ = nullptr;
    multi_backward_ = nullptr;
    released_ = true;
  }
  bool released() const { return released_; }

  // Where the op was created, when it was recorded in anomaly mode (else null).
  const detail::CreationTrace* creation_trace() const { return trace_.get(); }
  void set_creation_trace(std::shared_ptr<const detail::CreationTrace> trace) { trace_ = std::move(trace); }

 private:
  std::string name_;
  std::vector<Edge> next_;
  Backward backward_;             // set for single-output ops
  MultiBackward multi_backward_;  // set for ops with several outputs
  std::vector<Output> outputs_;
  bool released_ = false;
  std::shared_ptr<const detail::CreationTrace> trace_;
};

// The sink of a leaf that requires grad: adds the incoming gradient into leaf.grad(), then runs
// the leaf's post-accumulate-grad hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and some input requires grad: the op must record itself.
bool needs_grad(const std::vector<Tensor>& inputs);
// Where a gradient for `t` flows: its grad_fn (at t's output slot), a leaf's AccumulateGrad, or
// a null node.
Edge gradient_edge(const Tensor& t);
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
// The same for an op with several outputs: one node, output i in slot i. Outputs that are not
// floating (indices, masks) stay off the graph and their slot receives an undefined gradient.
// An observer (OutputObserver) sees the first output.
void record(std::string name, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
            Node::MultiBackward backward);

// Runs backward from `root` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad);

// Runs `callback` when the backward now running has finished, after every gradient was
// accumulated (PyTorch's queue_callback): a post-accumulate-grad hook uses it to act once per
// backward, as DataParallel does to wait for its last all-reduces. Callbacks run in the order
// queued, still inside backward (their exceptions leave backward). Valid only during a backward.
void queue_callback(std::function<void()> callback);

}  // namespace hg::autograd
