// col2im for stride-1 convolutions, one implementation per CPU level (cpu::isa()): the
// backward of im2col, summing every column entry into the image pixel it was read from.
// ops/conv.cpp uses it for f32 column matrices with stride 1 (the common case).
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

struct Col2imShape {
  int64_t C, H, W;    // the image (C, H, W)
  int64_t kh, kw;     // kernel
  int64_t pad;        // zero padding on each side (stride is 1)
  int64_t OH, OW;     // output size: H + 2*pad - kh + 1, W + 2*pad - kw + 1
};

// image (C, H, W) = col2im(cols), overwriting the image; cols has C*kh*kw rows of OH*OW
// values, `pitch` apart, row (c*kh + i)*kw + j holding tap (i, j) of channel c.
void col2im_stride1(const float* cols, int64_t pitch, const Col2imShape& g, float* image);

}  // namespace hg::kernels::cpu
