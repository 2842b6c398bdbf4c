// What a training run holds, part by part: the bytes the allocator gave each part's tensors --
// their distinct storages, each counted once and whole (a view of the full dataset holds all of
// it), exactly what hg::memory counted when it allocated them. hg-train --compare writes them to
// its CSV and lesson 16 prints them; docs/amp.md's figure 5 stacks them.
//
//   hg_train::MemoryParts parts = hg_train::live_parts(model, opt, {images, labels});  // as a step begins
//   parts.gradients = hg_train::gradient_bytes(opt);  // after backward: zero_grad frees them
//
// Header-only: lesson 16 includes it without linking hg-train's sources.
#pragma once
#include <set>
#include <vector>

#include "halfgrad.h"

namespace hg_train {

// The bytes of the distinct storages these tensors hold (an undefined tensor holds none).
inline int64_t held_bytes(const std::vector<hg::Tensor>& tensors) {
  std::set<const hg::Storage*> seen;
  int64_t bytes = 0;
  for (const hg::Tensor& t : tensors)
    if (t.defined() && seen.insert(t.impl()->storage.get()).second) bytes += t.impl()->storage->nbytes();
  return bytes;
}

// The parameters' gradients as backward left them (after zero_grad: none).
inline int64_t gradient_bytes(const hg::optim::Optimizer& optimizer) {
  std::vector<hg::Tensor> grads;
  for (const hg::Tensor& p : optimizer.parameters()) grads.push_back(p.grad());
  return held_bytes(grads);
}

// The optimizer's per-parameter state tensors (momentum, moments, f32 masters, Kahan's
// compensation), measured on the copies its state dict makes: the same shapes and dtypes. The
// step counts are host integers (0-d device tensors on CUDA, a few bytes) and are left out.
inline int64_t optimizer_state_bytes(const hg::optim::Optimizer& optimizer) {
  std::vector<hg::Tensor> state;
  for (const auto& [name, t] : optimizer.state_dict())
    if (name.starts_with("state.") && !name.ends_with(".step")) state.push_back(t);
  return held_bytes(state);
}

// A step's memory by part (bytes). Live before the step: the dataset, the weights, the optimizer
// state and what else was allocated (the batch, a few scalars); the step adds the activations
// saved for backward, the gradients and its transient buffers.
struct MemoryParts {
  int64_t live_before_step = 0;  // hg::memory::allocated() as the step began (its zero_grad done)
  int64_t dataset = 0;           // the images and labels held (training and test sets)
  int64_t weights = 0;           // the model's parameters and buffers (batch-norm statistics)
  int64_t optimizer_state = 0;
  int64_t batch = 0;             // the step's inputs and labels, when made before it (hg-train)
  int64_t gradients = 0;         // after backward
};

// The parts that are live before a step, with hg::memory::allocated(device) now (call it where the
// step begins; the state dict's copies are freed before the count is taken). On CUDA the dataset
// stays in the host's memory: it is not part of the device's count.
inline MemoryParts live_parts(const hg::nn::Module& model, const hg::optim::Optimizer& optimizer,
                              const std::vector<hg::Tensor>& dataset, const std::vector<hg::Tensor>& batch = {},
                              hg::Device device = hg::Device::cpu()) {
  MemoryParts parts;
  parts.optimizer_state = optimizer_state_bytes(optimizer);
  std::vector<hg::Tensor> weights = model.parameters();
  for (const hg::Tensor& b : model.buffers()) weights.push_back(b);
  parts.weights = held_bytes(weights);
  parts.dataset = held_bytes(dataset);
  parts.batch = held_bytes(batch);
  parts.live_before_step = hg::memory::allocated(device);
  return parts;
}

}  // namespace hg_train
