// Indexing and rearranging (PyTorch's torch.index_select, gather, scatter_add, flip, roll,
// repeat, nn.functional.pad and one_hot). Indices are i64 (or i32) tensors on the input's device;
// an index out of range is an hg::Error naming the op, the index and the dimension, never a read
// or write outside the tensor.
//
//   index_select(x, dim, idx)      the slices idx[0], idx[1], ... of x along dim (idx 1-D)
//   gather(x, dim, idx)            out[i][j][k] = x[i][idx[i][j][k]][k] for dim = 1 (any rank);
//                                  out has idx's shape, idx.size(d) <= x.size(d) for d != dim
//   scatter_add(x, dim, idx, src)  x with src[i][j][k] added at [i][idx[i][j][k]][k] (dim = 1);
//                                  repeated indices add up; the inverse of gather
//   flip(x, dims)                  reversed along each of dims
//   roll(x, shift, dim)            shifted by `shift` along dim, wrapping around
//   repeat(x, repeats)             tiled: repeats[d] copies along each dim (more repeats than
//                                  dims add leading dims, as PyTorch's Tensor.repeat)
//   pad(x, pads, {mode, value})    pads = {left, right} of the last dim, then of the one before,
//                                  ...; "constant" (negative pads crop), "reflect" (the edge not
//                                  repeated; pad < size), "replicate" (the edge repeated)
//   one_hot(idx, num_classes)      i64 [..., num_classes] with a 1 at each index; num_classes -1:
//                                  the largest index + 1
//
// All but one_hot are differentiable. index_select, gather and scatter_add copy or add with the
// embedding kernels (kernels/embedding.h: CPU and CUDA); the others are made of views, cat and
// index_select.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg {

Tensor index_select(const Tensor& x, int dim, const Tensor& index);
Tensor gather(const Tensor& x, int dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);

Tensor flip(const Tensor& x, Shape dims);
Tensor roll(const Tensor& x, int64_t shift, int dim);
Tensor repeat(const Tensor& x, Shape repeats);

struct PadOptions {
  std::string mode = "constant";  // "constant", "reflect" or "replicate"
  double value = 0;               // "constant" only
};
Tensor pad(const Tensor& x, std::vector<int64_t> pads, PadOptions options = {});

Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

}  // namespace hg
