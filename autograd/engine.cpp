// The backward engine. It orders every node reachable from the root so that each node runs after
// all the nodes that feed it a gradient (reverse DFS post-order: deterministic, since edges are
// visited in input order), sums the gradients arriving at each node (per output slot, for a node
// with several outputs), runs each node once and frees it, so the memory of the graph comes back
// as backward proceeds. Callbacks queued during the backward (queue_callback) run at its end.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "kernels/accumulate.h"

namespace hg::autograd {

namespace {

// Root first; every node appears before the nodes of its inputs.
std::vector<Node*> topological_order(Node* root) {
  std::vector<Node*> post_order;
  std::unordered_set<Node*> visited{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};  // (node, next edge to visit)
  while (!stack.empty()) {
    auto& [node, edge] = stack.back();
    if (edge < node->next().size()) {
      Node* child = node->next()[edge++].node.get();
      if (child != nullptr && visited.insert(child).second) stack.emplace_back(child, 0);
    } else {
      post_order.push_back(node);
      stack.pop_back();
    }
  }
  std::reverse(post_order.begin(), post_order.end());
  return post_order;
}

Tensor initial_gradient(const Tensor& root, const Tensor& grad) {
  if (!grad.defined()) {
    HG_CHECK(root.numel() == 1, "backward: grad can be implicitly created only for scalar outputs, but the "
             "output has shape ", root.shape(), "; pass a gradient of that shape");
    return ones(root.shape(), root.options());
  }
  HG_CHECK(grad.shape() == root.shape(), "backward: gradient of shape ", grad.shape(),
           " does not match the output's shape ", root.shape());
  HG_CHECK(grad.device() == root.device(), "backward: gradient on ", grad.device(), " for an output on ",
           root.device());
  // detach: the caller's tensor must never become (and later be accumulated into as) a .grad().
  return grad.dtype() == root.dtype() ? grad.detach() : kernels::converted(grad, root.dtype());
}

// The gradients waiting at each node, one slot per output of the node; an arriving gradient is
// added to what its slot already holds.
using PendingGradients = std::unordered_map<Node*, std::vector<Tensor>>;

void add_gradient(PendingGradients& pending, const Edge& edge, const Tensor& grad) {
  std::vector<Tensor>& slots = pending[edge.node.get()];
  if (slots.empty()) slots.resize(edge.node->num_outputs());
  Tensor& slot = slots[edge.output_nr];
  slot = slot.defined() ? kernels::added(slot, grad) : grad;
}

// The callbacks of the backward running on this thread (null outside one). A pointer to the
// engine's local vector, so a nested backward (a hook calling backward) keeps its own.
thread_local std::vector<std::function<void()>>* t_final_callbacks = nullptr;

struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer = t_final_callbacks;
  CallbackScope() { t_final_callbacks = &callbacks; }
  ~CallbackScope() { t_final_callbacks = outer; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};

}  // namespace

void queue_callback(std::function<void()> callback) {
  HG_CHECK(t_final_callbacks != nullptr, "autograd::queue_callback: only valid while a backward runs (call it "
           "from a hook)");
  t_final_callbacks->push_back(std::move(callback));
}

void run_backward(const Tensor& root, const Tensor& grad) {
  HG_CHECK(root.requires_grad(), "backward: the tensor does not require grad and has no grad_fn "
           "(did you forget requires_grad_() on the inputs, or run the forward under NoGradGuard?)");
  NoGradGuard no_grad;  // backward closures are ops too; they must not record
  autograd::BackwardScope in_backward;  // ... and must not be re-cast by the forward's autocast region
  const Tensor g0 = initial_gradient(root, grad);
  const Edge root_edge = gradient_edge(root);

  CallbackScope final_callbacks;
  const bool detect_anomaly = AnomalyMode::is_enabled();
  PendingGradients pending;
  add_gradient(pending, root_edge, g0);
  for (Node* node : topological_order(root_edge.node.get())) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // every path to it carried "no gradient"
    std::vector<Tensor> grads = std::move(it->second);
    pending.erase(it);
    for (size_t k = 0; k < grads.size(); ++k)
      HG_CHECK(!grads[k].defined() || grads[k].shape() == node->output(k).shape, "backward: '", node->name(),
               "' received a gradient of shape ", grads[k].shape(), " for an output of shape ",
               node->output(k).shape);
    std::vector<Tensor> input_grads = node->apply(std::move(grads));
    if (dynamic_cast<AccumulateGrad*>(node) == nullptr) {
      HG_CHECK(input_grads.size() == node->next().size(), "backward: '", node->name(), "' returned ",
               input_grads.size(), " gradients for ", node->next().size(), " inputs");
      if (detect_anomaly) detail::check_gradients(node->name(), input_grads, node->creation_trace());
      node->release();
    }
    for (size_t i = 0; i < node->next().size(); ++i) {
      const Edge& next = node->next()[i];
      if (next.node == nullptr || !input_grads[i].defined()) continue;
      add_gradient(pending, next, input_grads[i]);
    }
  }
  // By index, each moved out before it runs: a callback may queue another (and grow the vector).
  for (size_t i = 0; i < final_callbacks.callbacks.size(); ++i) {
    const std::function<void()> callback = std::move(final_callbacks.callbacks[i]);
    callback();
  }
}

}  // namespace hg::autograd
