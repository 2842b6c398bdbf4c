// Graph nodes, saved tensors and recording.
#include "autograd/node.h"

#include <utility>

#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "kernels/accumulate.h"

namespace hg {

namespace {
thread_local bool t_grad_enabled = true;
}
bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

namespace {
thread_local int t_backward_depth = 0;
}
int autograd::backward_depth() { return t_backward_depth; }
autograd::BackwardScope::BackwardScope() { ++t_backward_depth; }
autograd::BackwardScope::~BackwardScope() { --t_backward_depth; }

namespace autograd {

// ---- SavedTensor -------------------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  alias_ = t.detach();
  version_ = t.impl()->storage->version();
}

Tensor SavedTensor::get() const {
  if (!alias_.defined()) return alias_;
  const uint64_t now = alias_.impl()->storage->version();
  if (now != version_)  // Node::apply adds the op's name
    throw SavedTensorModified(::hg::detail::str("a tensor of shape ", alias_.shape(), " saved by '%s' for its backward was "
                                          "modified by an in-place operation (version ", now, ", expected ", version_,
                                          "). Clone it before modifying it, or modify a copy."));
  return alias_;
}

// ---- Node --------------------------------------------------------------------------------------

Node::Node(std::string name, std::vector<Edge> next, Backward backward, const Tensor& output)
    : name_(std::move(name)),
      next_(std::move(next)),
      backward_(std::move(backward)),
      outputs_{{output.shape(), output.dtype(), output.device()}} {}

Node::Node(std::string name, std::vector<Edge> next, MultiBackward backward, const std::vector<Tensor>& outputs)
    : name_(std::move(name)), next_(std::move(next)), multi_backward_(std::move(backward)) {
  for (const Tensor& t : outputs) outputs_.push_back({t.shape(), t.dtype(), t.device()});
}

// NOTE: a graph can be a chain hundreds of thousands of nodes long (a loop of 300k ops, or the
// classic `total = total + loss` without .item()). Left to the default destructor, each node's
// destruction would release its inputs' nodes from inside itself: one stack frame per node, a
// stack overflow somewhere past ~100k. Instead the nodes this node alone keeps alive are moved
// to a worklist, and their own inputs with them, so every node is destroyed with its edges
// already empty (PyTorch's deleteNode does the same). A node shared with a live graph
// (use_count > 1) is just released: whoever holds it frees it later, the same way.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> unreferenced;
  const auto take_sole_owned = [&unreferenced](std::vector<Edge>& edges) {
    for (Edge& edge : edges)
      if (edge.node != nullptr && edge.node.use_count() == 1) unreferenced.push_back(std::move(edge.node));
  };
  take_sole_owned(next_);
  while (!unreferenced.empty()) {
    std::shared_ptr<Node> node = std::move(unreferenced.back());
    unreferenced.pop_back();
    take_sole_owned(node->next_);
  }  // `node` dies here, with nothing left to free below it
}

std::vector<Tensor> Node::apply(std::vector<Tensor> grad_outputs) {
  HG_CHECK(!released_, "backward: trying to backward through the graph a second time (the graph of '", name_,
           "' was freed by the first backward). Run the forward pass again.");
  try {
    if (backward_) return backward_(grad_outputs[0]);  // the engine calls a node only once a gradient arrived
    // Several outputs: an output no gradient reached (the loss used only the other) counts as
    // zeros, so a backward can use every grad_outputs[i] without checking. Integer outputs have none.
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (!grad_outputs[i].defined() && is_floating(outputs_[i].dtype))
        grad_outputs[i] = zeros(outputs_[i].shape, {.dtype = outputs_[i].dtype, .device = outputs_[i].device});
    return multi_backward_(std::move(grad_outputs));
  } catch (const SavedTensorModified& e) {  // a tensor this node saved: its name goes into the message
    std::string message = e.what();
    message.replace(message.find("%s"), 2, name_);
    HG_FAIL("backward: ", message);
  }
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad", {}, nullptr, Tensor(leaf)), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grad_outputs) {
  const Tensor& grad_output = grad_outputs[0];
  Tensor leaf(leaf_);
  Tensor g = grad_output.dtype() == leaf.dtype() ? grad_output : kernels::converted(grad_output, leaf.dtype());
  if (!leaf_->grad) {
    // Keep the incoming buffer when nobody else can see it; otherwise own a copy, so that later
    // accumulation in place never writes into a tensor the user holds.
    const bool exclusive = g.is_contiguous() && g.impl()->storage.use_count() == 1;
    leaf_->grad = (exclusive ? g.detach() : kernels::copied(g)).impl_ptr();
  } else {
    kernels::add_into(Tensor(leaf_->grad), g);
  }
  // Copied first: a hook may remove itself (or register another) while it runs.
  const auto hooks = leaf_->post_accumulate_grad_hooks;
  for (const auto& [id, hook] : hooks) hook(leaf);
  return {};
}

// ---- recording ---------------------------------------------------------------------------------

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.impl()->output_nr};
  std::shared_ptr<Node> accumulator = t.impl()->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
    t.impl()->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

namespace {
thread_local OutputObserver* t_output_observer = nullptr;
}  // namespace

OutputObserver* set_output_observer(OutputObserver* observer) { return std::exchange(t_output_observer, observer); }

namespace {
// The node of one recorded op: an edge per input, the creation trace in anomaly mode.
template <class Backward, class Outputs>
std::shared_ptr<Node> make_node(std::string name, const std::vector<Tensor>& inputs, Backward backward,
                                const Outputs& outputs) {
  std::vector<Edge> next;
  next.reserve(inputs.size());
  for (const Tensor& t : inputs) next.push_back(gradient_edge(t));
  auto node = std::make_shared<Node>(std::move(name), std::move(next), std::move(backward), outputs);
  if (AnomalyMode::is_enabled()) node->set_creation_trace(detail::capture_creation_trace());
  return node;
}
}  // namespace

void record(std::string name, Tensor& output, const std::vector<Tensor>& inputs, Node::Backward backward) {
  if (t_output_observer != nullptr) t_output_observer->on_output(name, output);
  if (!needs_grad(inputs)) return;
  output.impl()->grad_fn = make_node(std::move(name), inputs, std::move(backward), output);
  output.impl()->output_nr = 0;
  output.impl()->requires_grad = true;
}

void record(std::string name, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
            Node::MultiBackward backward) {
  if (t_output_observer != nullptr && !outputs.empty()) t_output_observer->on_output(name, outputs[0]);
  if (!needs_grad(inputs)) return;
  const std::shared_ptr<Node> node = make_node(std::move(name), inputs, std::move(backward), outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !is_floating(outputs[i].dtype())) continue;
    outputs[i].impl()->grad_fn = node;
    outputs[i].impl()->output_nr = uint32_t(i);
    outputs[i].impl()->requires_grad = true;
  }
}

}  // namespace autograd
}  // namespace hg
