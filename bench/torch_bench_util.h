// What the halfgrad vs LibTorch benchmarks (train_compare, models_compare) share: moving batches
// into LibTorch, which BLAS LibTorch runs on, capping LibTorch to halfgrad's HG_CPU_ISA level,
// and measuring each run in a process of its own.
#pragma once
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace hg_bench {

inline torch::Tensor to_torch(const hg::Tensor& t) {
  const hg::Tensor c = t.contiguous();
  std::vector<int64_t> sizes(c.shape().begin(), c.shape().end());
  const auto dtype = c.dtype() == hg::f32 ? torch::kFloat32 : torch::kInt64;
  return torch::from_blob(c.raw_data(), sizes, torch::TensorOptions().dtype(dtype)).clone();
}

// The BLAS library LibTorch's linear layers call, as the loader resolved libblas.so.3 (Debian's
// alternatives pick it). NOTE: with only libtorch-dev installed, Debian resolves it to the netlib
// reference BLAS, measured here at ~2 GFLOP/s against ~100 for OpenBLAS on the same core: LibTorch's
// MLP is then 20x slower than it should be and any ratio against it is meaningless.
inline std::string torch_blas() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find('/');
    if (at == std::string::npos || line.find("libblas.so") == std::string::npos) continue;
    std::string path = line.substr(at);
    char resolved[4096];
    if (realpath(path.c_str(), resolved)) path = resolved;
    return path;
  }
  return "not loaded";
}

inline bool is_reference_blas(const std::string& path) {
  return path.find("/blas/libblas.so") != std::string::npos;  // Debian's libblas3 (netlib) location
}

// With HG_CPU_ISA capping halfgrad, LibTorch is capped to the same level too, so the comparison is
// the one a user of that CPU would see: OpenBLAS (OPENBLAS_CORETYPE), ATen's own kernels
// (ATEN_CPU_CAPABILITY) and oneDNN (DNNL_MAX_CPU_ISA) read these at load time, so the program sets
// them and runs itself again. A value the user set is kept. Returns the caps in effect, or "".
inline std::string cap_torch_like_halfgrad(char** argv) {
  const char* level = std::getenv("HG_CPU_ISA");
  if (level == nullptr) return "";
  struct Caps { const char* level; const char* openblas; const char* aten; const char* dnnl; };
  static constexpr Caps kCaps[] = {{"generic", "Prescott", "default", "SSE41"},
                                   {"avx2", "Haswell", "avx2", "AVX2"},
                                   {"avx512", "SkylakeX", "avx512", "AVX512_CORE"}};
  for (const Caps& caps : kCaps) {
    if (std::strcmp(level, caps.level) != 0) continue;
    if (std::getenv("HG_BENCH_TORCH_CAPPED") == nullptr) {
      setenv("OPENBLAS_CORETYPE", caps.openblas, 0);
      setenv("ATEN_CPU_CAPABILITY", caps.aten, 0);
      setenv("DNNL_MAX_CPU_ISA", caps.dnnl, 0);
      setenv("HG_BENCH_TORCH_CAPPED", "1", 1);
      execv("/proc/self/exe", argv);  // returns only on failure: then LibTorch runs uncapped
      return "";
    }
    return std::string("OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") +
           " ATEN_CPU_CAPABILITY=" + std::getenv("ATEN_CPU_CAPABILITY") + " DNNL_MAX_CPU_ISA=" + std::getenv("DNNL_MAX_CPU_ISA");
  }
  return "";
}


// run() in a forked process, its result sent back through a pipe (-1 when the child failed).
// NOTE: the two runtimes' thread pools otherwise compete (measured: either framework lost a third
// of its 2-thread speed when measured after the other in the same process).
inline double measure_in_child(const std::function<double()>& run) {
  int fd[2];
  if (pipe(fd) != 0) return -1.0;
  const pid_t child = fork();
  if (child == 0) {
    close(fd[0]);
    const double value = run();
    if (write(fd[1], &value, sizeof value) != sizeof value) _exit(1);
    _exit(0);
  }
  close(fd[1]);
  double value = -1;
  if (read(fd[0], &value, sizeof value) != sizeof value) value = -1;
  close(fd[0]);
  waitpid(child, nullptr, 0);
  return value;
}

}  // namespace hg_bench
