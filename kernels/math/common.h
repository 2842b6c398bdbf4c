// HG_HD marks the scalar math functors in kernels/math/ as callable from CPU kernels and from CUDA
// kernels (kernels/cuda/), so both backends share one definition of every formula.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define HG_HD __host__ __device__ __forceinline__
#else
#define HG_HD inline
#endif
