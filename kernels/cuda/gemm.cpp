// cuBLASLt GEMMs for CUDA tensors: matmul's (batched) product, linear's forward with the bias
// fused into the GEMM epilogue, and linear's weight gradient with the bias gradient fused.
//
// cuBLAS is column-major and halfgrad row-major. A row-major C (M, N) has the bytes of a
// column-major C^T (N, M), and C^T = B^T A^T, so every product is issued with the operands
// swapped and nothing is copied: cuBLASLt's "A" is our b, its "B" is our a, its D is (N, M).
// Transposed views are free too: an operand stored column-major is passed with CUBLAS_OP_T.
//
// Per device: one cuBLASLt handle, one 32 MiB workspace and a cache of heuristic results, so
// cublasLtMatmulAlgoGetHeuristic runs once per problem shape. Everything runs on the legacy
// default stream, like the rest of halfgrad.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "core/cuda/gemm_settings.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/gemm_layout.h"

namespace hg {

// ---- settings -------------------------------------------------------------------------------------

namespace cuda {
namespace {
std::atomic<bool> tf32_flag{false};  // the documented process-wide switch of gemm_settings.h
}  // namespace
void allow_tf32(bool allow) { tf32_flag.store(allow); }
bool tf32_allowed() { return tf32_flag.load(); }
}  // namespace cuda

namespace kernels::cuda {

// ---- per-device state (declared in kernels/cuda/cublaslt.h) ---------------------------------------

std::mutex& lt_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Created on first use and never destroyed: at process exit the CUDA runtime may already be gone,
// and the driver reclaims everything anyway.
LtDevice& lt_device(int index) {
  static std::map<int, LtDevice> devices;
  std::lock_guard<std::mutex> lock(lt_mutex());
  LtDevice& device = devices[index];
  if (device.workspace == nullptr) device.workspace = kernels::cuda::allocate_library_workspace(kWorkspaceBytes, "cuBLASLt");
  if (device.handle == nullptr) HG_CUBLAS_CHECK(cublasLtCreate(&device.handle));
  return device;
}

namespace {

// ---- operands -------------------------------------------------------------------------------------

// One operand as cuBLASLt sees it: a (rows, cols) matrix in halfgrad's terms, stored row-major
// (element (i, j) at i*ld + j) or column-major (at i + j*ld).
struct Operand {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool row_major = true;
  int64_t ld = 0;
  int64_t batch_stride = 0;  // elements from one batch's matrix to the next; 0 broadcasts it
};

// The layout of a strided (rows, cols) view, if it is row- or column-major (kernels/gemm_layout.h).
std::optional<Operand> layout_of(const void* data, int64_t rows, int64_t cols, int64_t row_stride,
                                 int64_t col_stride, int64_t batch_stride) {
  switch (gemm_layout(rows, cols, row_stride, col_stride)) {
    case GemmLayout::RowMajor: return Operand{data, rows, cols, true, rows == 1 ? cols : row_stride, batch_stride};
    case GemmLayout::ColumnMajor: return Operand{data, rows, cols, false, cols == 1 ? rows : col_stride, batch_stride};
    case GemmLayout::Neither: break;
  }
  return std::nullopt;
}

// The matrix in t's last two dims (t^T's with `transposed`), batched over a leading dim of size
// `batch` (or broadcast when t is 2-D or that dim is 1). `holder` keeps a contiguous copy alive
// when t's layout fits neither order.
Operand operand_of(const Tensor& t, bool transposed, int64_t batch, Tensor& holder) {
  const int n = t.dim();
  HG_CHECK(n == 2 || n == 3, "matmul (CUDA): expected a 2-D or 3-D operand, got shape ", t.shape());
  const bool batched = n == 3 && t.shape()[0] > 1;
  HG_CHECK(!batched || t.shape()[0] == batch, "matmul (CUDA): operand batch ", t.shape()[0], " does not match ", batch);
  const int r = transposed ? n - 1 : n - 2, c = transposed ? n - 2 : n - 1;
  std::optional<Operand> op = layout_of(t.raw_data(), t.shape()[r], t.shape()[c], t.strides()[r], t.strides()[c],
                                        batched ? t.strides()[0] : 0);
  if (op) return *op;
  // Rare: matmul and linear already hand over gemm-ready operands. A contiguous copy is row-major.
  holder = detail::dense(t);
  op = layout_of(holder.raw_data(), holder.shape()[r], holder.shape()[c], holder.strides()[r], holder.strides()[c],
                 batched ? holder.strides()[0] : 0);
  HG_CHECK(op.has_value(), "matmul (CUDA): no GEMM layout for a contiguous operand of shape ", t.shape());
  return *op;
}

// ---- the problem, its descriptors, the heuristic cache --------------------------------------------

// out (batch, m, n) = a (m, k) @ b (k, n), `out` contiguous, all of one dtype.
struct Gemm {
  DType dtype = f32;
  Operand a, b;
  void* out = nullptr;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS epilogues: the bias (n); BGRADB: the bias gradient to write (m)
};

// Storage type, compute type and scale (alpha/beta) type of a dtype.
struct LtTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

// The dtype table (core/dtype.h) keeps cudaDataType_t as plain integers; they must be cuBLAS's.
static_assert(dtype_info(f32).cuda_data_type == CUDA_R_32F && dtype_info(f64).cuda_data_type == CUDA_R_64F &&
              dtype_info(f16).cuda_data_type == CUDA_R_16F && dtype_info(bf16).cuda_data_type == CUDA_R_16BF &&
              dtype_info(i32).cuda_data_type == CUDA_R_32I && dtype_info(i64).cuda_data_type == CUDA_R_64I &&
              dtype_info(u8).cuda_data_type == CUDA_R_8U && dtype_info(f8e4m3).cuda_data_type == CUDA_R_8F_E4M3 &&
              dtype_info(f8e5m2).cuda_data_type == CUDA_R_8F_E5M2, "kDTypeTable's cuda_data_type column is not cuBLAS's");

cudaDataType_t cuda_data_type(DType dtype) { return static_cast<cudaDataType_t>(dtype_info(dtype).cuda_data_type); }

LtTypes lt_types(DType dtype) {
  HG_CHECK(is_floating(dtype), "matmul (CUDA): cuBLASLt needs f16, bf16, f32 or f64 tensors, got ", dtype);
  // NOTE: 16-bit operands always accumulate in f32 (the table's accumulate dtype, which alpha and
  // beta share); f32 uses TF32 tensor cores only when allowed, since it changes results at the
  // 1e-3 level.
  const DType accumulate = accumulate_dtype(dtype);
  cublasComputeType_t compute = accumulate == f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  if (dtype == f32 && ::hg::cuda::tf32_allowed()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  return {cuda_data_type(dtype), compute, cuda_data_type(accumulate)};
}

// cuBLASLt's A is our b: its op(A) must be b^T (n, k). A row-major matrix X has the bytes of a
// column-major X^T, so it goes in untransposed with X^T's shape; a column-major one goes in as is
// and gets CUBLAS_OP_T. The same rule makes our a into op(B) = a^T (k, m).
cublasOperation_t op_of(const Operand& x) { return x.row_major ? CUBLAS_OP_N : CUBLAS_OP_T; }
int64_t layout_rows(const Operand& x) { return x.row_major ? x.cols : x.rows; }
int64_t layout_cols(const Operand& x) { return x.row_major ? x.rows : x.cols; }

// Everything the chosen algorithm depends on.
using GemmKey = std::array<int64_t, 19>;

GemmKey key_of(int device, const Gemm& g, const LtTypes& types) {
  return {device,          int64_t(types.data),     int64_t(types.compute),    int64_t(g.epilogue),
          op_of(g.b),      op_of(g.a),              g.m,                       g.n,
          g.k,             g.b.ld,                  g.a.ld,                    g.batch,
          g.b.batch_stride, g.a.batch_stride,       alignment_of(g.b.data),    alignment_of(g.a.data),
          alignment_of(g.out), alignment_of(g.bias), int64_t(g.bias != nullptr)};
}

// The descriptors of one call: built per call (cheap, host-only); only the heuristic is cached.
struct GemmDescriptors {
  MatmulDesc desc;
  MatrixLayout a, b, d;  // cuBLASLt's A (our b), B (our a), and C = D (out^T, (n, m))

  GemmDescriptors(const Gemm& g, const LtTypes& t)
      : desc(t.compute, t.scale),
        a(t.data, layout_rows(g.b), layout_cols(g.b), g.b.ld),
        b(t.data, layout_rows(g.a), layout_cols(g.a), g.a.ld),
        d(t.data, g.n, g.m, g.n) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(op_of(g.b)));
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(op_of(g.a)));
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(g.epilogue));
    // The heuristic reads the bias pointer's alignment, so it is set before the query too. Its
    // data type defaults to D's, which is ours.
    if (g.bias != nullptr) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.batch > 1) {
      a.set_batch(g.batch, g.b.batch_stride);
      b.set_batch(g.batch, g.a.batch_stride);
      d.set_batch(g.batch, g.m * g.n);
    }
  }
};

// The best algorithm for `g` by cuBLASLt's heuristic, or none when it has no kernel for the
// configuration (an epilogue it does not support for these types, say).
std::optional<cublasLtMatmulHeuristicResult_t> query_heuristic(cublasLtHandle_t handle, const Gemm& g,
                                                               const GemmDescriptors& d) {
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.b.data));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.a.data));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.out));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.out));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, d.desc.desc, d.a.layout, d.b.layout, d.d.layout,
                                                               d.d.layout, pref.pref, 1, &result, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && count == 0)) return std::nullopt;
  HG_CUBLAS_CHECK(status);
  if (result.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  return result;
}

// The cached heuristic result for `g`; queried (and remembered, even when there is none) once.
std::optional<cublasLtMatmulHeuristicResult_t> find_algorithm(int device, cublasLtHandle_t handle, const Gemm& g,
                                                              const LtTypes& types, const GemmDescriptors& d) {
  static std::map<GemmKey, std::optional<cublasLtMatmulHeuristicResult_t>> cache;
  const GemmKey key = key_of(device, g, types);
  std::lock_guard<std::mutex> lock(lt_mutex());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, query_heuristic(handle, g, d)).first;
  return it->second;
}

// ---- running a GEMM -------------------------------------------------------------------------------

// NOTE: tensor cores take 16-bit tiles whose sides are multiples of 8; other sizes run on padded
// or slower kernels. Said once per process, on stderr, naming the first offending shape.
void lint_tensor_cores(const Gemm& g) {
  if (!is_16bit_floating(g.dtype) || (g.m % 8 == 0 && g.n % 8 == 0 && g.k % 8 == 0)) return;
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "halfgrad: warning: a %s GEMM with M=%lld, N=%lld, K=%lld has a size that is not a multiple of 8; "
               "tensor cores run it below full speed (pad features and batch sizes to multiples of 8). "
               "Shown once.\n",
               std::string(dtype_name(g.dtype)).c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
               static_cast<long long>(g.k));
}

// Runs `g` on `device`. Returns false, having done nothing, when cuBLASLt has no algorithm for it
// and `may_decline` (the caller then has a fallback); throws otherwise.
bool run_gemm(Device device, const Gemm& g, const char* op, bool may_decline = false) {
  HG_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.batch <= INT_MAX, op,
           " (CUDA): GEMM sizes must fit in 32 bits, got M=", g.m, ", N=", g.n, ", K=", g.k, ", batch=", g.batch);
  const LtTypes types = lt_types(g.dtype);
  LtDevice& lt = lt_device(device.index());
  const GemmDescriptors d(g, types);
  const std::optional<cublasLtMatmulHeuristicResult_t> algo = find_algorithm(device.index(), lt.handle, g, types, d);
  if (!algo) {
    if (may_decline) return false;
    HG_FAIL(op, " (CUDA): cuBLASLt has no algorithm for a ", g.dtype, " GEMM with M=", g.m, ", N=", g.n, ", K=", g.k,
            ", batch=", g.batch, ", epilogue ", int(g.epilogue), ", ", g.a.row_major ? "row" : "column", "-major a, ",
            g.b.row_major ? "row" : "column", "-major b");
  }
  lint_tensor_cores(g);
  // D = alpha * op(A) op(B) + beta * C, then the epilogue; beta = 0 so C (= D) is never read.
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const bool f64_scale = types.scale == CUDA_R_64F;
  const void* alpha = f64_scale ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = f64_scale ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  HG_CUBLAS_CHECK(cublasLtMatmul(lt.handle, d.desc.desc, alpha, g.b.data, d.a.layout, g.a.data, d.b.layout, beta, g.out,
                                 d.d.layout, g.out, d.d.layout, &algo->algo, lt.workspace, kWorkspaceBytes,
                                 /*stream: the legacy default stream*/ nullptr));
  return true;
}

void check_operands(const char* op, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    HG_CHECK(t->dtype() == out.dtype() && t->device() == out.device(), op, " (CUDA): operands must share the output's ",
             "dtype and device (", out.dtype(), " on ", out.device(), "), got ", t->dtype(), " on ", t->device());
  HG_CHECK(out.is_contiguous(), op, " (CUDA): the output must be contiguous");
}

}  // namespace

// ---- entry points ---------------------------------------------------------------------------------

void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_operands("matmul", out, {&a, &b});
  detail::check_cuda_device(out.device(), "matmul");
  const int64_t batch = out.dim() == 3 ? out.shape()[0] : 1;
  const int64_t m = out.shape()[out.dim() - 2], n = out.shape()[out.dim() - 1], k = a.shape()[a.dim() - 1];
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: zeros, as on the CPU (cuBLASLt does not take K = 0)
    HG_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, size_t(out.numel()) * element_size(out.dtype()), nullptr));
    return;
  }
  Tensor a_copy, b_copy;
  Gemm g;
  g.dtype = out.dtype();
  g.a = operand_of(a, false, batch, a_copy);
  g.b = operand_of(b, false, batch, b_copy);
  g.out = out.raw_data();
  g.m = m, g.n = n, g.k = k, g.batch = batch;
  run_gemm(out.device(), g, "matmul");
}

// out (rows, out_features) = x2 (rows, in) @ w^T + bias: w (out_features, in) is used as the
// transposed operand directly, and the bias is cuBLASLt's bias vector along D's rows, which are
// out's columns. `out` is overwritten (beta = 0).
// NOTE: no cuBLASLt RELU epilogue for linear's Epilogue::Relu: it computes max(y, 0), which maps
// NaN to 0 where relu keeps NaN; ops/linalg.cpp applies relu's own functor afterwards instead.
void linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias, const Tensor& out) {
  check_operands("linear", out, {&x2, &w});
  detail::check_cuda_device(out.device(), "linear");
  const int64_t rows = x2.shape()[0], in = x2.shape()[1], out_features = w.shape()[0];
  if (rows == 0 || out_features == 0) return;
  HG_CHECK(in > 0, "linear (CUDA): in_features must be positive (linear skips the GEMM when it is 0)");
  Tensor x_copy, w_copy, bias_packed;
  Gemm g;
  g.dtype = out.dtype();
  g.a = operand_of(x2, false, 1, x_copy);
  g.b = operand_of(w, /*transposed=*/true, 1, w_copy);
  g.out = out.raw_data();
  g.m = rows, g.n = out_features, g.k = in;
  if (bias.defined()) {
    check_operands("linear", out, {&bias});
    bias_packed = detail::dense(bias);  // cuBLASLt wants a packed vector
    g.bias = bias_packed.raw_data();
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  run_gemm(out.device(), g, "linear");
}

// grad_w (out_features, in) = g2^T (out_features, rows) @ x2 (rows, in), and, when grad_bias is
// defined, grad_bias (out_features) = g2 summed over rows in the same kernel (CUBLASLT_EPILOGUE_BGRADB:
// cuBLASLt's B is g2^T's transpose, g2 itself, and its reduction over K = rows is the bias
// gradient). Returns whether grad_bias was written: where cuBLASLt has no BGRADB kernel for the
// case, only grad_w is, and the caller sums g2 itself.
bool linear_weight_grad(const Tensor& g2, const Tensor& x2, const Tensor& grad_w, const Tensor& grad_bias) {
  check_operands("linear backward", grad_w, {&g2, &x2});
  detail::check_cuda_device(grad_w.device(), "linear backward");
  const int64_t rows = g2.shape()[0], out_features = g2.shape()[1], in = x2.shape()[1];
  if (out_features == 0 || in == 0) return grad_bias.defined() && out_features == 0;
  if (rows == 0) {  // an empty batch: the gradients are sums of nothing
    HG_CUDA_CHECK(cudaMemsetAsync(grad_w.raw_data(), 0, size_t(grad_w.numel()) * element_size(grad_w.dtype()), nullptr));
    if (grad_bias.defined())
      HG_CUDA_CHECK(cudaMemsetAsync(grad_bias.raw_data(), 0, size_t(grad_bias.numel()) * element_size(grad_bias.dtype()), nullptr));
    return grad_bias.defined();
  }
  Tensor g_copy, x_copy;
  Gemm g;
  g.dtype = grad_w.dtype();
  g.a = operand_of(g2, /*transposed=*/true, 1, g_copy);
  g.b = operand_of(x2, false, 1, x_copy);
  g.out = grad_w.raw_data();
  g.m = out_features, g.n = in, g.k = rows;
  if (grad_bias.defined()) {
    check_operands("linear backward", grad_w, {&grad_bias});
    HG_CHECK(grad_bias.is_contiguous(), "linear backward (CUDA): grad_bias must be contiguous");
    Gemm fused = g;
    fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    fused.bias = grad_bias.raw_data();
    if (run_gemm(grad_w.device(), fused, "linear backward", /*may_decline=*/true)) return true;
  }
  run_gemm(grad_w.device(), g, "linear backward");
  return false;
}

}  // namespace kernels::cuda

}  // namespace hg
