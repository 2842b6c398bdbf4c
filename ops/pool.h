// 2-D pooling on NCHW tensors, PyTorch's (torch.nn.functional.max_pool2d, avg_pool2d,
// adaptive_avg_pool2d, adaptive_max_pool2d). Output size per spatial dimension:
//   floor((H + 2 padding - kernel) / stride) + 1   (the ceiling with ceil_mode, but a window
//                                                    never starts in the right padding)
// max_pool2d skips the padding and propagates NaN; avg_pool2d divides by the window's size
// counting the padding (count_include_pad, the default) or only the input's elements.
//
//   hg::max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1})   // a ResNet stem's pool
//   hg::adaptive_avg_pool2d(x, {1, 1})                             // global average pooling
#pragma once
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace hg {

struct MaxPool2dFuncOptions {
  int64_t kernel = 0;
  std::optional<int64_t> stride = {};  // default: the kernel (non-overlapping windows)
  int64_t padding = 0;                 // at most kernel / 2 on each side
  bool ceil_mode = false;
};

struct AvgPool2dFuncOptions {
  int64_t kernel = 0;
  std::optional<int64_t> stride = {};  // default: the kernel
  int64_t padding = 0;                 // zeros, at most kernel / 2 on each side
  bool ceil_mode = false;
  bool count_include_pad = true;       // divide by the window's size with its padding
};

Tensor max_pool2d(const Tensor& x, MaxPool2dFuncOptions options);
Tensor avg_pool2d(const Tensor& x, AvgPool2dFuncOptions options);
// The positional forms: no padding; stride = kernel when left out, PyTorch's default.
inline Tensor max_pool2d(const Tensor& x, int kernel, int stride) { return max_pool2d(x, {.kernel = kernel, .stride = stride}); }
inline Tensor avg_pool2d(const Tensor& x, int kernel, int stride) { return avg_pool2d(x, {.kernel = kernel, .stride = stride}); }
inline Tensor max_pool2d(const Tensor& x, int kernel) { return max_pool2d(x, {.kernel = kernel}); }
inline Tensor avg_pool2d(const Tensor& x, int kernel) { return avg_pool2d(x, {.kernel = kernel}); }

// Output (N, C, output_size[0], output_size[1]): output (i, j) is the mean of the input's rows
// [floor(i H / OH), ceil((i + 1) H / OH)) and the like columns. {1, 1}: the mean of each plane.
Tensor adaptive_avg_pool2d(const Tensor& x, Shape output_size);
// The maximum of each of those bins (NaN wins, then the first maximum, as max_pool2d).
Tensor adaptive_max_pool2d(const Tensor& x, Shape output_size);

}  // namespace hg
