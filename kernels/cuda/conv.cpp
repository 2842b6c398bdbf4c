// cuDNN convolutions for CUDA tensors: conv2d's forward and its backward (data and filter
// gradients; the bias and its gradient use halfgrad's own kernels). Contiguous NCHW tensors of f16/bf16/f32/f64; 16-bit
// data computes in f32 on tensor cores. Each algorithm comes from cuDNN's _v7 heuristics once per
// shape and is cached; its workspace is a grow-only buffer per device. When that buffer cannot
// grow (the GPU is full), the cached choice is replaced by the best algorithm whose workspace can
// be had, instead of failing every later call. Operands are 16-byte aligned before cuDNN sees them
// (see realigned). Legacy cuDNN API (still shipped in cuDNN 9), on the legacy default stream like
// the rest of halfgrad.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/determinism.h"
#include "core/cuda/gemm_settings.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cpu/elementwise_loop.h"
#include "kernels/math/elementwise.h"
#include "kernels/reduce.h"

namespace hg::kernels::cuda {

namespace {

// NOTE: the fastest algorithm can want gigabytes of scratch space (FFT variants); one that wants
// more than this is passed over for the next best.
constexpr size_t kMaxWorkspaceBytes = size_t(1) << 30;
constexpr size_t kWorkspaceRound = size_t(2) << 20;  // grow in 2 MiB steps

// ---- per-device state -----------------------------------------------------------------------------

struct DnnDevice {
  cudnnHandle_t handle = nullptr;
  void* workspace = nullptr;  // cudaMalloc'ed, outside hg::memory's counters (see library_check.h)
  size_t workspace_bytes = 0;
};

// One lock for all cuDNN work, held for a whole conv call: the workspace can then never be
// replaced (grown) under a call that uses it, and the algorithm cache needs no lock of its own.
// The device runs the calls one after another on the default stream anyway.
std::mutex& dnn_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The caller holds dnn_mutex. Handles are never destroyed: at process exit the CUDA runtime may
// already be gone. A new handle works on the default (NULL) stream.
DnnDevice& dnn_device(int index) {
  static std::map<int, DnnDevice> devices;
  DnnDevice& device = devices[index];
  if (device.handle == nullptr) HG_CUDNN_CHECK(cudnnCreate(&device.handle));
  return device;
}

// HG_CUDNN_WORKSPACE_LIMIT_MB=n (README, troubleshooting): never a cuDNN workspace above n MiB,
// as if the GPU had no more to give, so convolutions take the algorithms that fit (PyTorch has
// CUDNN_CONV_WSCAP_DBG for the same). Read once; unset means no limit.
size_t workspace_limit() {
  static const size_t limit = [] {
    const char* value = std::getenv("HG_CUDNN_WORKSPACE_LIMIT_MB");
    return value == nullptr || value[0] == '\0' ? SIZE_MAX : size_t(std::strtoull(value, nullptr, 10)) << 20;
  }();
  return limit;
}

// Grows the device's workspace to at least nbytes; false (and no workspace left) when the GPU
// cannot give that much even after the caching allocator returned its free memory.
bool ensure_workspace(DnnDevice& device, size_t nbytes) {
  if (nbytes > workspace_limit()) return false;
  if (nbytes <= device.workspace_bytes) return true;
  if (device.workspace != nullptr) {
    // Kernels queued earlier may still read the old block; let them finish before freeing it.
    HG_CUDA_CHECK(cudaDeviceSynchronize());
    HG_CUDA_CHECK(cudaFree(device.workspace));
    cuda_detail::count_host_sync();
    cuda_detail::count_host_sync();
    device.workspace = nullptr;
    device.workspace_bytes = 0;
  }
  const size_t rounded = (nbytes + kWorkspaceRound - 1) / kWorkspaceRound * kWorkspaceRound;
  cudaError_t status = cudaMalloc(&device.workspace, rounded);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    ::hg::cuda::empty_cache();
    status = cudaMalloc(&device.workspace, rounded);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    device.workspace = nullptr;
    return false;
  }
  HG_CUDA_CHECK(status);
  device.workspace_bytes = rounded;
  return true;
}

// ---- types, shapes, descriptors -------------------------------------------------------------------

struct DnnTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  cudnnMathType_t math;
};

// The dtype table (core/dtype.h) keeps cudnnDataType_t as plain integers; they must be cuDNN's.
static_assert(dtype_info(f32).cudnn_data_type == CUDNN_DATA_FLOAT &&
              dtype_info(f64).cudnn_data_type == CUDNN_DATA_DOUBLE &&
              dtype_info(f16).cudnn_data_type == CUDNN_DATA_HALF &&
              dtype_info(bf16).cudnn_data_type == CUDNN_DATA_BFLOAT16 &&
              dtype_info(i32).cudnn_data_type == CUDNN_DATA_INT32 &&
              dtype_info(i64).cudnn_data_type == CUDNN_DATA_INT64 && dtype_info(u8).cudnn_data_type == CUDNN_DATA_UINT8 &&
              dtype_info(f8e4m3).cudnn_data_type == CUDNN_DATA_FP8_E4M3 &&
              dtype_info(f8e5m2).cudnn_data_type == CUDNN_DATA_FP8_E5M2,
              "kDTypeTable's cudnn_data_type column is not cuDNN's");

cudnnDataType_t cudnn_data_type(DType dtype) { return static_cast<cudnnDataType_t>(dtype_info(dtype).cudnn_data_type); }

DnnTypes dnn_types(DType dtype) {
  HG_CHECK(is_floating(dtype), "conv2d (CUDA): cuDNN needs f16, bf16, f32 or f64 tensors, got ", dtype);
  // NOTE: 16-bit data accumulates in f32 (the table's accumulate dtype; cuDNN's "pseudo-half"
  // configuration) on tensor cores. f32 stays on the FMA units unless TF32 is allowed:
  // CUDNN_DEFAULT_MATH lets cuDNN use TF32.
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // f64
  if (is_16bit_floating(dtype)) math = CUDNN_TENSOR_OP_MATH;
  if (dtype == f32 && !::hg::cuda::tf32_allowed()) math = CUDNN_FMA_MATH;
  return {cudnn_data_type(dtype), cudnn_data_type(accumulate_dtype(dtype)), math};
}

// cuDNN's alpha/beta live on the host: double for double data, float for every other type.
struct Scalars {
  bool is_double;
  float float_values[2] = {1.0f, 0.0f};
  double double_values[2] = {1.0, 0.0};
  const void* one() const { return is_double ? static_cast<const void*>(&double_values[0]) : &float_values[0]; }
  const void* zero() const { return is_double ? static_cast<const void*>(&double_values[1]) : &float_values[1]; }
};

struct ConvShape {
  int n, c, h, w;    // input (N, C, H, W)
  int o, oh, ow;     // output (N, O, OH, OW)
  int kh, kw;        // weight (O, C / groups, kh, kw)
  int stride, pad, dilation, groups;
};

int to_int(int64_t value, const char* what) {
  HG_CHECK(value >= 0 && value <= INT_MAX, "conv2d (CUDA): ", what, " (", value, ") does not fit cuDNN's 32-bit sizes");
  return int(value);
}

ConvShape conv_shape(const Tensor& x, const Tensor& y, const ConvGeometry& g) {
  HG_CHECK(x.dim() == 4 && y.dim() == 4, "conv2d (CUDA): expected 4-D (N, C, H, W) tensors, got ", x.shape(), " and ",
           y.shape());
  // NOTE: the legacy API indexes NCHW tensors with 32-bit integers.
  to_int(x.numel(), "the input's element count");
  to_int(y.numel(), "the output's element count");
  return {to_int(x.shape()[0], "N"),  to_int(x.shape()[1], "C"),  to_int(x.shape()[2], "H"),
          to_int(x.shape()[3], "W"),  to_int(y.shape()[1], "O"),  to_int(y.shape()[2], "OH"),
          to_int(y.shape()[3], "OW"), to_int(g.kh, "kh"),         to_int(g.kw, "kw"),
          to_int(g.stride, "stride"), to_int(g.pad, "padding"),   to_int(g.dilation, "dilation"),
          to_int(g.groups, "groups")};
}

// RAII owners. The full constructors delegate to the creating one: once that has finished the
// object exists, so if setting the descriptor throws, the destructor still frees it.
struct TensorDesc {
  cudnnTensorDescriptor_t desc = nullptr;
  TensorDesc() { HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc)); }
  TensorDesc(cudnnDataType_t type, int n, int c, int h, int w) : TensorDesc() {
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, type, n, c, h, w));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(desc); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t desc = nullptr;
  FilterDesc() { HG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc)); }
  FilterDesc(cudnnDataType_t type, int o, int c, int kh, int kw) : FilterDesc() {
    HG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc, type, CUDNN_TENSOR_NCHW, o, c, kh, kw));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(desc); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t desc = nullptr;
  ConvDesc() { HG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc)); }
  ConvDesc(const ConvShape& s, const DnnTypes& types) : ConvDesc() {
    // halfgrad's conv2d, like PyTorch's, is a cross-correlation (the kernel is not flipped).
    HG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc, s.pad, s.pad, s.stride, s.stride, s.dilation, s.dilation,
                                                   CUDNN_CROSS_CORRELATION, types.compute));
    HG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc, s.groups));
    HG_CUDNN_CHECK(cudnnSetConvolutionMathType(desc, types.math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(desc); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The four descriptors of one convolution: input x, output y (or their gradients), weight, conv.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  ConvDescs(const ConvShape& s, const DnnTypes& t)
      : x(t.data, s.n, s.c, s.h, s.w), y(t.data, s.n, s.o, s.oh, s.ow), w(t.data, s.o, s.c / s.groups, s.kh, s.kw),
        conv(s, t) {}
};

// ---- algorithm choice -----------------------------------------------------------------------------

enum class Pass { Forward, BackwardData, BackwardFilter };

const char* pass_name(Pass pass) {
  return pass == Pass::Forward ? "conv2d forward" : pass == Pass::BackwardData ? "conv2d backward (input)"
                                                                               : "conv2d backward (weight)";
}

// One entry of a _v7 heuristic list, whatever the pass.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

template <class Perf>
std::vector<Candidate> candidates_of(const std::vector<Perf>& perf, int count) {
  std::vector<Candidate> out;
  for (int i = 0; i < count && i < int(perf.size()); ++i)
    out.push_back({int(perf[size_t(i)].algo), perf[size_t(i)].status, perf[size_t(i)].determinism,
                   perf[size_t(i)].mathType});
  return out;
}

// cuDNN's heuristic ranking for the pass, best first (no benchmarking: deterministic choice).
std::vector<Candidate> heuristic_candidates(Pass pass, cudnnHandle_t handle, const ConvDescs& d) {
  int max_count = 0, count = 0;
  if (pass == Pass::Forward) {
    HG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(max_count, 1)));
    HG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.desc, d.w.desc, d.conv.desc, d.y.desc,
                                                          int(perf.size()), &count, perf.data()));
    return candidates_of(perf, count);
  }
  if (pass == Pass::BackwardData) {
    HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(max_count, 1)));
    HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.desc, d.y.desc, d.conv.desc, d.x.desc,
                                                               int(perf.size()), &count, perf.data()));
    return candidates_of(perf, count);
  }
  HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(max_count, 1)));
  HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.desc, d.y.desc, d.conv.desc, d.w.desc,
                                                               int(perf.size()), &count, perf.data()));
  return candidates_of(perf, count);
}

// The workspace `algo` needs with the math type currently set on d.conv; the status says whether
// the algorithm supports the configuration at all.
cudnnStatus_t workspace_size(Pass pass, cudnnHandle_t handle, const ConvDescs& d, int algo, size_t* bytes) {
  if (pass == Pass::Forward)
    return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x.desc, d.w.desc, d.conv.desc, d.y.desc,
                                                   cudnnConvolutionFwdAlgo_t(algo), bytes);
  if (pass == Pass::BackwardData)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w.desc, d.y.desc, d.conv.desc, d.x.desc,
                                                        cudnnConvolutionBwdDataAlgo_t(algo), bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x.desc, d.y.desc, d.conv.desc, d.w.desc,
                                                        cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
}

struct Algorithm {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

// The first heuristic candidate that works, is deterministic when deterministic mode is on, needs
// at most kMaxWorkspaceBytes, and whose workspace `fits` (by default: any within that bound).
template <class Fits>
Algorithm choose_algorithm(Pass pass, cudnnHandle_t handle, const ConvDescs& d, const DnnTypes& t, bool deterministic,
                           const Fits& fits) {
  for (const Candidate& c : heuristic_candidates(pass, handle, d)) {
    if (c.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && c.determinism != CUDNN_DETERMINISTIC) continue;
    // Since cuDNN 7.4 an algorithm is (algo, math type), and the list may mix math types. Without
    // TF32 an f32 convolution keeps CUDNN_FMA_MATH whatever the list says.
    const cudnnMathType_t math = t.math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : c.math;
    HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.desc, math));
    size_t bytes = 0;
    if (workspace_size(pass, handle, d, c.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspaceBytes) continue;
    if (!fits(bytes)) continue;
    return {c.algo, math, bytes};
  }
  if (deterministic) detail::alert_nondeterministic(pass_name(pass));  // throws: only non-deterministic ones left
  HG_FAIL(pass_name(pass), " (CUDA): cuDNN offers no usable algorithm (within ", kMaxWorkspaceBytes >> 20,
          " MiB of workspace, and what the GPU can give now) for this shape and dtype");
}

using AlgoKey = std::array<int64_t, 16>;

// The choice for this pass, shape, dtype and mode, with its workspace ready; the caller holds
// dnn_mutex. Cached per key. When the cached choice's workspace cannot be allocated, the best
// candidate whose workspace can be takes its place in the cache: later calls then run at once
// instead of failing the same way (hg::cuda::empty_cache() does not bring the old choice back).
Algorithm cached_algorithm(Pass pass, int device, DnnDevice& dnn, const ConvDescs& d, const ConvShape& s,
                           const DnnTypes& t) {
  static std::map<AlgoKey, Algorithm> cache;
  const bool deterministic = are_deterministic_algorithms_enabled();
  const AlgoKey key{device, int64_t(pass), int64_t(t.data), int64_t(t.math), int64_t(deterministic),
                    s.n,    s.c,           s.h,             s.w,            s.o,
                    s.kh,   s.kw,          s.stride,        s.pad,          s.dilation,
                    s.groups};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const auto any = [](size_t) { return true; };
    it = cache.emplace(key, choose_algorithm(pass, dnn.handle, d, t, deterministic, any)).first;
  }
  if (!ensure_workspace(dnn, it->second.workspace)) {
    const auto can_allocate = [&dnn](size_t bytes) { return ensure_workspace(dnn, bytes); };
    it->second = choose_algorithm(pass, dnn.handle, d, t, deterministic, can_allocate);
  }
  return it->second;
}

// ---- running --------------------------------------------------------------------------------------

void check_operands(const char* op, const Tensor& reference, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    HG_CHECK(t->dtype() == reference.dtype() && t->device() == reference.device(), op, " (CUDA): tensors must share ",
             "one dtype and device (", reference.dtype(), " on ", reference.device(), "), got ", t->dtype(), " on ",
             t->device());
  }
}

void check_output(const char* op, const Tensor& t) {
  if (t.defined()) HG_CHECK(t.is_contiguous(), op, " (CUDA): output tensors must be contiguous");
}

// Everything one conv call holds while it runs: the device (under the lock), types and scalars.
struct DnnCall {
  std::lock_guard<std::mutex> lock{dnn_mutex()};
  int index;
  DnnDevice& device;
  DnnTypes types;
  Scalars scalars;
  DnnCall(Device d, DType dtype)
      : index(d.index()), device(dnn_device(d.index())), types(dnn_types(dtype)), scalars{accumulate_dtype(dtype) == f64} {}
};

// The algorithm for `pass`, with its math type set on d.conv and its workspace ready.
struct Prepared {
  Algorithm algorithm;
  void* scratch;
};

Prepared prepare(Pass pass, DnnCall& call, const ConvDescs& d, const ConvShape& s) {
  const Algorithm a = cached_algorithm(pass, call.index, call.device, d, s, call.types);
  HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.desc, a.math));
  return {a, call.device.workspace};
}

// NOTE: cuDNN's kernels may read 16-bit data with vector loads that need 16-byte alignment, and the
// legacy API's heuristics never see the pointers: a cached algorithm could meet a view that is
// only 2-byte aligned (an f16 tensor narrowed by one element along N) and fail or fault. Such an
// operand is copied into fresh memory (the caching allocator aligns to 512 bytes) first.
constexpr uintptr_t kDnnAlignment = 16;
bool dnn_aligned(const Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.raw_data()) % kDnnAlignment == 0;
}
Tensor realigned(const Tensor& t) { return dnn_aligned(t) ? t : detail::dense_copy(t); }

// An output cuDNN writes: the tensor itself when aligned, else fresh memory copied back by finish().
struct DnnOutput {
  Tensor target, work;
  explicit DnnOutput(const Tensor& t) : target(t), work(dnn_aligned(t) ? t : empty(t.shape(), t.options())) {}
  void* data() const { return work.raw_data(); }
  void finish() const {
    if (!work.is_same(target)) detail::copy_into(target, work);
  }
};

// The value of an empty sum (no input channels, a zero-sized kernel, an empty batch).
void fill_zeros(const Tensor& t) {
  HG_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, size_t(t.numel()) * element_size(t.dtype()), nullptr));
}

// out += bias (O) broadcast over N, OH, OW, with halfgrad's own elementwise kernel.
// NOTE: not cudnnAddTensor / cudnnConvolutionBackwardBias: both are deprecated in cuDNN 9 and
// their bf16 support is undocumented; the bias path is memory-bound either way.
void add_bias(DnnCall&, const ConvShape& s, const Tensor& bias, const Tensor& out) {
  const Tensor b = detail::dense_view(detail::dense(bias), {1, s.o, 1, 1});
  kernels::map_into<2>(out, {out, b}, math::Add{});
}

// grad_bias (O) = dy summed over N, OH, OW (halfgrad's deterministic reduction kernel).
void bias_backward(DnnCall&, const ConvShape&, const Tensor& dy, const Tensor& grad_bias) {
  if (dy.numel() == 0) return fill_zeros(grad_bias);
  const Tensor sums = kernels::reduce(kernels::ReduceKind::Sum, kernels::plan_reduction(dy, {0, 2, 3}, "conv2d"), false);
  detail::copy_into(grad_bias, sums);
}

}  // namespace

// ---- entry points ---------------------------------------------------------------------------------

// out (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, kh, kw)) (+ bias (O) per channel).
// NOTE: tensor cores want 16-bit convolutions with channel counts that are multiples of 8 (cuDNN
// pads or falls back to slower kernels otherwise). Said once per process, on stderr.
void lint_tensor_cores(DType dtype, int64_t in_channels, int64_t out_channels) {
  if (!is_16bit_floating(dtype) || (in_channels % 8 == 0 && out_channels % 8 == 0)) return;
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "halfgrad: warning: a %s conv2d with %lld input and %lld output channels: channel counts that are "
               "not multiples of 8 keep tensor cores below full speed. Shown once.\n",
               std::string(dtype_name(dtype)).c_str(), static_cast<long long>(in_channels),
               static_cast<long long>(out_channels));
}

void conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Tensor& out,
                    const ConvGeometry& g) {
  check_operands("conv2d", out, {&x_in, &w_in, &bias});
  check_output("conv2d", out);
  detail::check_cuda_device(out.device(), "conv2d");
  if (out.numel() == 0) return;
  const Tensor x = realigned(detail::dense(x_in)), w = realigned(detail::dense(w_in));
  const ConvShape s = conv_shape(x, out, g);
  if (s.groups == 1) lint_tensor_cores(out.dtype(), s.c, s.o);  // (grouped: cuDNN picks its own kernels)
  DnnCall call(out.device(), out.dtype());
  if (s.c == 0 || s.kh == 0 || s.kw == 0) {  // cuDNN rejects zero-sized filters
    fill_zeros(out);
  } else {
    const ConvDescs d(s, call.types);
    int n = 0, c = 0, h = 0, wd = 0;  // cuDNN's own output shape must be the one conv2d allocated
    HG_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv.desc, d.x.desc, d.w.desc, &n, &c, &h, &wd));
    HG_CHECK(n == s.n && c == s.o && h == s.oh && wd == s.ow, "conv2d (CUDA): cuDNN computes an output of (", n, ", ",
             c, ", ", h, ", ", wd, ") but the output tensor is ", out.shape());
    const Prepared p = prepare(Pass::Forward, call, d, s);
    const DnnOutput y(out);
    HG_CUDNN_CHECK(cudnnConvolutionForward(call.device.handle, call.scalars.one(), d.x.desc, x.raw_data(), d.w.desc,
                                           w.raw_data(), d.conv.desc, cudnnConvolutionFwdAlgo_t(p.algorithm.algo),
                                           p.scratch, p.algorithm.workspace, call.scalars.zero(), d.y.desc, y.data()));
    y.finish();
  }
  if (bias.defined()) add_bias(call, s, bias, out);
}

// Writes each defined gradient of conv2d from grad (N, O, OH, OW): grad_x (N, C, H, W) needs w,
// grad_w (O, C, kh, kw) needs x, grad_bias (O) needs only grad.
void conv2d_backward(const Tensor& x_in, const Tensor& w_in, const Tensor& grad, const ConvGeometry& g,
                     const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias) {
  check_operands("conv2d backward", grad, {&x_in, &w_in, &grad_x, &grad_w, &grad_bias});
  for (const Tensor* t : {&grad_x, &grad_w, &grad_bias}) check_output("conv2d backward", *t);
  HG_CHECK(!grad_x.defined() || w_in.defined(), "conv2d backward (CUDA): the input's gradient needs the weight");
  detail::check_cuda_device(grad.device(), "conv2d backward");
  const Tensor dy = realigned(detail::dense(grad)), x = realigned(detail::dense(x_in));
  const Tensor w = w_in.defined() ? realigned(detail::dense(w_in)) : Tensor();
  const int64_t kh = g.kh, kw = g.kw;
  const ConvShape s = conv_shape(x, dy, g);
  DnnCall call(grad.device(), grad.dtype());
  if (grad_bias.defined() && grad_bias.numel() > 0) bias_backward(call, s, dy, grad_bias);
  const bool need_x = grad_x.defined() && grad_x.numel() > 0, need_w = grad_w.defined() && grad_w.numel() > 0;
  if (!need_x && !need_w) return;
  if (dy.numel() == 0 || x.numel() == 0 || kh == 0 || kw == 0) {  // empty sums; cuDNN takes no empty tensors
    if (need_x) fill_zeros(grad_x);
    if (need_w) fill_zeros(grad_w);
    return;
  }
  const ConvDescs d(s, call.types);
  if (need_x) {  // grad_x = the transposed convolution of grad with w
    const Prepared p = prepare(Pass::BackwardData, call, d, s);
    const DnnOutput dx(grad_x);
    HG_CUDNN_CHECK(cudnnConvolutionBackwardData(call.device.handle, call.scalars.one(), d.w.desc, w.raw_data(),
                                                d.y.desc, dy.raw_data(), d.conv.desc,
                                                cudnnConvolutionBwdDataAlgo_t(p.algorithm.algo), p.scratch,
                                                p.algorithm.workspace, call.scalars.zero(), d.x.desc, dx.data()));
    dx.finish();
  }
  if (need_w) {  // grad_w = the correlation of x with grad, summed over the batch
    const Prepared p = prepare(Pass::BackwardFilter, call, d, s);
    const DnnOutput dw(grad_w);
    HG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(call.device.handle, call.scalars.one(), d.x.desc, x.raw_data(),
                                                  d.y.desc, dy.raw_data(), d.conv.desc,
                                                  cudnnConvolutionBwdFilterAlgo_t(p.algorithm.algo), p.scratch,
                                                  p.algorithm.workspace, call.scalars.zero(), d.w.desc, dw.data()));
    dw.finish();
  }
}

}  // namespace hg::kernels::cuda
