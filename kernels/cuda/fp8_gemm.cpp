// The cuBLASLt FP8 GEMM (kernels/cuda/fp8.h): out (M, N) = (a (M, K) b (N, K)^T) * a_scale_inv *
// b_scale_inv on FP8 tensor cores (sm_89 Ada, sm_90 Hopper), f32 accumulation, f32 or bf16 out.
//
// As in gemm.cpp the row-major product is issued as its column-major transpose, out^T (N, M) =
// b (N, K) a^T (K, M): cuBLASLt's A is our b, its B our a. Hopper's FP8 kernels take only the "TN"
// layout -- A transposed, B not, both with K innermost -- and a row-major (rows, K) matrix is a
// column-major (K, rows) one, so both operands go in as they are stored, A with CUBLAS_OP_T.
// The scales are device pointers (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER): cuBLASLt multiplies
// the f32 accumulator by them, so a scale computed on the GPU is never copied to the host. No
// D scale: that one is for an FP8 D only. The amax of D comes from CUBLASLT_MATMUL_DESC_AMAX_D_POINTER
// where cuBLASLt has a kernel with it, else from fp8_amax_into after the GEMM.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <optional>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_copy.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/library_check.h"

namespace hg::kernels::cuda {

namespace {

// ---- the problem and its descriptors ----------------------------------------------------------

struct Fp8Gemm {
  const Tensor *a, *b, *out;            // (M, K), (N, K), (M, N)
  const void *a_scale_inv, *b_scale_inv;  // 0-d f32 on the device
  void* amax = nullptr;                 // 0-d f32 for AMAX_D, or null
  int64_t m = 0, n = 0, k = 0;
};

cudaDataType_t lt_type(DType dtype) { return static_cast<cudaDataType_t>(dtype_info(dtype).cuda_data_type); }

struct Fp8Descriptors {
  MatmulDesc desc;
  MatrixLayout a, b, d;  // cuBLASLt's A (our b), B (our a), and C = D (out^T, (N, M))

  explicit Fp8Descriptors(const Fp8Gemm& g)
      : desc(CUBLAS_COMPUTE_32F, CUDA_R_32F),
        a(lt_type(g.b->dtype()), g.k, g.n, g.k),
        b(lt_type(g.a->dtype()), g.k, g.m, g.k),
        d(lt_type(g.out->dtype()), g.n, g.m, g.n) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale_inv);
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale_inv);
    // NOTE: fast accumulation keeps the whole K sum in the tensor cores' narrower accumulator;
    // off (the default, said here), partial sums are promoted to f32 as they go, which keeps the
    // result within f32 summation-order differences of the CPU emulation.
    desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(0));
    if (g.amax != nullptr) desc.set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, g.amax);
  }
};

// Everything the chosen algorithm depends on.
using Fp8Key = std::array<int64_t, 11>;

Fp8Key key_of(int device, const Fp8Gemm& g) {
  return {device,
          int64_t(g.a->dtype()),
          int64_t(g.b->dtype()),
          int64_t(g.out->dtype()),
          g.m,
          g.n,
          g.k,
          int64_t(g.amax != nullptr),
          alignment_of(g.a->raw_data()),
          alignment_of(g.b->raw_data()),
          alignment_of(g.out->raw_data())};
}

std::optional<cublasLtMatmulHeuristicResult_t> query_heuristic(cublasLtHandle_t handle, const Fp8Gemm& g,
                                                               const Fp8Descriptors& d) {
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.b->raw_data()));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.a->raw_data()));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.out->raw_data()));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.out->raw_data()));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, d.desc.desc, d.a.layout, d.b.layout, d.d.layout,
                                                               d.d.layout, pref.pref, 1, &result, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
      (status == CUBLAS_STATUS_SUCCESS && count == 0))
    return std::nullopt;
  HG_CUBLAS_CHECK(status);
  if (result.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  return result;
}

// The cached heuristic result for `g`, queried once per key (a miss is remembered too).
std::optional<cublasLtMatmulHeuristicResult_t> find_algorithm(int device, cublasLtHandle_t handle, const Fp8Gemm& g,
                                                              const Fp8Descriptors& d) {
  static std::map<Fp8Key, std::optional<cublasLtMatmulHeuristicResult_t>> cache;
  const Fp8Key key = key_of(device, g);
  std::lock_guard<std::mutex> lock(lt_mutex());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, query_heuristic(handle, g, d)).first;
  return it->second;
}

// Runs g; false, having launched nothing, when cuBLASLt has no algorithm for it.
bool run(Device device, const Fp8Gemm& g) {
  LtDevice& lt = lt_device(device.index());
  const Fp8Descriptors d(g);
  const std::optional<cublasLtMatmulHeuristicResult_t> algo = find_algorithm(device.index(), lt.handle, g, d);
  if (!algo) return false;
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: C (= D) is never read
  HG_CUBLAS_CHECK(cublasLtMatmul(lt.handle, d.desc.desc, &alpha, g.b->raw_data(), d.a.layout, g.a->raw_data(),
                                 d.b.layout, &beta, g.out->raw_data(), d.d.layout, g.out->raw_data(), d.d.layout,
                                 &algo->algo, lt.workspace, kWorkspaceBytes, /*stream: the legacy default stream*/ nullptr));
  return true;
}

// ---- the checks: everything cuBLASLt would refuse, refused first with our words --------------

void check_scale(const Tensor& scale, const Tensor& out, const char* name) {
  HG_CHECK(scale.defined() && scale.dtype() == f32 && scale.numel() == 1 && scale.device() == out.device(),
           "fp8_gemm: ", name, " must be a one-element f32 tensor on ", out.device());
}

void check_fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                    const Tensor& out, const Tensor& amax_out) {
  HG_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()), "fp8_gemm: operands must be f8e4m3 or f8e5m2, got ",
           a.dtype(), " and ", b.dtype());
  HG_CHECK(!(a.dtype() == f8e5m2 && b.dtype() == f8e5m2),
           "fp8_gemm: cuBLASLt has no f8e5m2 x f8e5m2 GEMM (E5M2 is for gradients; the other operand must be f8e4m3)");
  HG_CHECK(out.dtype() == f32 || out.dtype() == bf16, "fp8_gemm: the output must be f32 or bf16, got ", out.dtype());
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.shape()[1] == b.shape()[1] &&
               out.shape()[0] == a.shape()[0] && out.shape()[1] == b.shape()[0],
           "fp8_gemm: expected a (M, K), b (N, K) and out (M, N), got ", a.shape(), ", ", b.shape(), " and ",
           out.shape());
  HG_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
           "fp8_gemm: operands and output must be contiguous (K innermost: cuBLASLt's FP8 \"TN\" layout)");
  HG_CHECK(a.device() == out.device() && b.device() == out.device() && out.device().is_cuda(),
           "fp8_gemm: operands must be on the output's CUDA device, got ", a.device(), ", ", b.device(), " and ",
           out.device());
  check_scale(a_scale_inv, out, "a_scale_inv");
  check_scale(b_scale_inv, out, "b_scale_inv");
  if (amax_out.defined()) check_scale(amax_out, out, "amax_out");
  const int64_t m = a.shape()[0], n = b.shape()[0], k = a.shape()[1];
  HG_CHECK(m % 16 == 0 && n % 16 == 0 && k % 16 == 0,
           "fp8_gemm: cuBLASLt's FP8 GEMM needs M, N and K to be multiples of 16, got M=", m, ", N=", n, ", K=", k);
  HG_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "fp8_gemm: sizes must fit in 32 bits, got M=", m, ", N=", n,
           ", K=", k);
}

}  // namespace

// ---- entry points ---------------------------------------------------------------------------------

bool fp8_gemm_supported(Device device) {
  if (!device.is_cuda() || device.index() >= ::hg::cuda::device_count()) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index()) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major * 10 + minor >= 89;
}

void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, const Tensor& out,
              const Tensor& amax_out) {
  check_fp8_gemm(a, a_scale_inv, b, b_scale_inv, out, amax_out);
  detail::check_cuda_device(out.device(), "fp8_gemm");
  HG_CHECK(fp8_gemm_supported(out.device()), "fp8_gemm: FP8 tensor cores need compute capability 8.9 or above (Ada, ",
           "Hopper); ", out.device(), " has less");
  Fp8Gemm g{&a, &b, &out, a_scale_inv.raw_data(), b_scale_inv.raw_data(), nullptr, a.shape()[0], b.shape()[0],
            a.shape()[1]};
  if (g.m == 0 || g.n == 0 || g.k == 0) {  // an empty sum is 0 (cuBLASLt does not take K = 0)
    HG_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, size_t(out.numel()) * element_size(out.dtype()), nullptr));
    if (amax_out.defined()) HG_CUDA_CHECK(cudaMemsetAsync(amax_out.raw_data(), 0, sizeof(float), nullptr));
    return;
  }
  if (amax_out.defined()) {
    Fp8Gemm with_amax = g;
    with_amax.amax = amax_out.raw_data();
    if (run(out.device(), with_amax)) return;
  }
  HG_CHECK(run(out.device(), g), "fp8_gemm: cuBLASLt has no FP8 algorithm for ", a.dtype(), " x ", b.dtype(), " -> ",
           out.dtype(), " with M=", g.m, ", N=", g.n, ", K=", g.k);
  if (amax_out.defined()) fp8_amax_into(out, amax_out);
}

}  // namespace hg::kernels::cuda
