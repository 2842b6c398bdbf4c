// Precision switches of the CUDA GEMM and convolution libraries. TF32 rounds f32 operands to a
// 10-bit mantissa inside the tensor cores (products accumulate in f32): f32 matmuls and convs run
// several times faster, with ~1e-3 relative error instead of ~1e-6. Off by default, for matmuls
// and convolutions alike: PyTorch's matmul default, but not its convolution default
// (torch.backends.cudnn.allow_tf32 is on), so an f32 conv2d here is the more exact one until you
// allow TF32. f16/bf16 products use tensor cores regardless.
//
//   hg::cuda::allow_tf32(true);   // later f32 matmul/linear (cuBLASLt) and conv2d (cuDNN) may use TF32
#pragma once

namespace hg::cuda {

// Process-wide (an atomic flag, not thread-local); read at every GEMM/conv call, and part of the
// algorithm caches' keys, so switching it takes effect at once.
void allow_tf32(bool allow);
bool tf32_allowed();

}  // namespace hg::cuda
