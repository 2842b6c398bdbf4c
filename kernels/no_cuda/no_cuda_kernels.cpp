// The op families' CUDA entry points (kernels/cuda/cuda_kernels.h) in a CPU-only build: each one says that
// halfgrad was built without CUDA.
#include "core/cuda/cuda_copy.h"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels::cuda {

void reduce(ReduceKind, const Tensor& x, const Tensor&, int64_t, int64_t, int64_t) {
  detail::check_cuda_device(x.device(), "reduce");
}

void batched_gemm(const Tensor& a, const Tensor&, const Tensor&) { detail::check_cuda_device(a.device(), "matmul"); }
bool linear_weight_grad(const Tensor& g, const Tensor&, const Tensor&, const Tensor&) {
  detail::check_cuda_device(g.device(), "linear");
  return false;
}
void linear_forward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&) {
  detail::check_cuda_device(x.device(), "linear");
}

void conv2d_forward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&) {
  detail::check_cuda_device(x.device(), "conv2d");
}
void conv2d_backward(const Tensor& x, const Tensor&, const Tensor&, const ConvGeometry&, const Tensor&, const Tensor&,
                     const Tensor&) {
  detail::check_cuda_device(x.device(), "conv2d");
}

void softmax(const Tensor& x, const Tensor&, int64_t, int64_t, int64_t, bool) {
  detail::check_cuda_device(x.device(), "softmax");
}
void softmax_backward(const Tensor& y, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool) {
  detail::check_cuda_device(y.device(), "softmax");
}

Tensor cross_entropy_forward(const Tensor& logits, const Tensor&, double, int64_t, Tensor&) {
  detail::check_cuda_device(logits.device(), "cross_entropy");
  return {};
}
void cross_entropy_backward(const Tensor& logits, const Tensor&, const Tensor&, double, int64_t, const Tensor&,
                            const Tensor&) {
  detail::check_cuda_device(logits.device(), "cross_entropy");
}

void max_pool2d_forward(const Tensor& x, const Tensor&, const Tensor&, const math::PoolGeometry&) {
  detail::check_cuda_device(x.device(), "max_pool2d");
}
void max_pool2d_backward(const Tensor& g, const Tensor&, const Tensor&, const math::PoolGeometry&) {
  detail::check_cuda_device(g.device(), "max_pool2d");
}
void avg_pool2d_forward(const Tensor& x, const Tensor&, const math::PoolGeometry&) {
  detail::check_cuda_device(x.device(), "avg_pool2d");
}
void avg_pool2d_backward(const Tensor& g, const Tensor&, const math::PoolGeometry&) {
  detail::check_cuda_device(g.device(), "avg_pool2d");
}
void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor&) { detail::check_cuda_device(x.device(), "adaptive_avg_pool2d"); }
void adaptive_avg_pool2d_backward(const Tensor& g, const Tensor&) { detail::check_cuda_device(g.device(), "adaptive_avg_pool2d"); }
void interpolate_forward(const Tensor& x, const Tensor&, const math::Resize&) {
  detail::check_cuda_device(x.device(), "interpolate");
}
void interpolate_backward(const Tensor& g, const Tensor&, const math::Resize&) {
  detail::check_cuda_device(g.device(), "interpolate");
}
void adaptive_max_pool2d_forward(const Tensor& x, const Tensor&, const Tensor&) {
  detail::check_cuda_device(x.device(), "adaptive_max_pool2d");
}
void adaptive_max_pool2d_backward(const Tensor& g, const Tensor&, const Tensor&) {
  detail::check_cuda_device(g.device(), "adaptive_max_pool2d");
}

void dropout(const Tensor& in, const Tensor&, double, uint64_t, uint64_t) { detail::check_cuda_device(in.device(), "dropout"); }

std::pair<Tensor, Tensor> attention_forward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                                            const AttentionGeometry&) {
  detail::check_cuda_device(q.device(), "scaled_dot_product_attention");
  return {};
}
std::array<Tensor, 3> attention_backward(const Tensor& q, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, const AttentionGeometry&) {
  detail::check_cuda_device(q.device(), "scaled_dot_product_attention");
  return {};
}

void unscale_and_check(const std::vector<Tensor>&, const std::vector<bool>&, const Tensor& scale, const Tensor&,
                       const Tensor&, const Tensor&) {
  detail::check_cuda_device(scale.device(), "GradScaler.unscale_");
}
void scaler_update(const Tensor& scale, const Tensor&, const Tensor&, const Tensor&, double, double, int64_t, double,
                   double, int32_t*) {
  detail::check_cuda_device(scale.device(), "GradScaler.update");
}
void sgd_update(const std::vector<Tensor>& w, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<Tensor>&, const std::vector<Tensor>&, const SgdHyper&, const Tensor&, const Tensor&) {
  detail::check_cuda_device(w.front().device(), "SGD");
}
void advance_step_counts(const std::vector<Tensor>&, const std::vector<Tensor>&, const Tensor& applied, const Tensor&) {
  detail::check_cuda_device(applied.device(), "optimizer");
}
void rmsprop_update(const std::vector<Tensor>& w, const std::vector<Tensor>&, const std::vector<Tensor>&,
                    const std::vector<std::array<Tensor, 3>>&, const math::RmspropStep&, const Tensor&, const Tensor&) {
  detail::check_cuda_device(w.front().device(), "RMSprop");
}
void adagrad_update(const std::vector<Tensor>& w, const std::vector<Tensor>&, const std::vector<Tensor>&,
                    const std::vector<std::array<Tensor, 3>>&, const std::vector<Tensor>&, const math::AdagradStep&,
                    const Tensor&, const Tensor&) {
  detail::check_cuda_device(w.front().device(), "Adagrad");
}
void adadelta_update(const std::vector<Tensor>& w, const std::vector<Tensor>&, const std::vector<Tensor>&,
                     const std::vector<std::array<Tensor, 3>>&, const math::AdadeltaStep&, const Tensor&, const Tensor&) {
  detail::check_cuda_device(w.front().device(), "Adadelta");
}
void adam_update(const std::vector<Tensor>& w, const std::vector<Tensor>&, const std::vector<Tensor>&,
                 const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&, const AdamHyper&,
                 const Tensor&, const Tensor&) {
  detail::check_cuda_device(w.front().device(), "Adam");
}

Tensor batch_norm_forward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, double,
                          Tensor&, Tensor&) {
  detail::check_cuda_device(x.device(), "batch_norm");
  return {};
}
void batch_norm_backward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, Tensor&, Tensor&,
                         Tensor&) {
  detail::check_cuda_device(x.device(), "batch_norm");
}
Tensor layer_norm_forward(const Tensor& x, const Tensor&, const Tensor&, int64_t, int64_t, double, Tensor&, Tensor&) {
  detail::check_cuda_device(x.device(), "layer_norm");
  return {};
}
void layer_norm_backward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                         Tensor&, Tensor&, Tensor&) {
  detail::check_cuda_device(x.device(), "layer_norm");
}
void embedding_forward(const Tensor& i, const Tensor&, const Tensor&) { detail::check_cuda_device(i.device(), "embedding"); }
void embedding_backward(const Tensor& i, const Tensor&, const Tensor&) { detail::check_cuda_device(i.device(), "embedding"); }

}  // namespace hg::kernels::cuda
