// The pooling windows' geometry and rules, the one definition the CPU loops (kernels/pool.cpp,
// kernels/cpu/pool.cpp) and the CUDA kernels (kernels/cuda/pool.cu) both run.
#pragma once
#include <cstdint>

#include "kernels/math/common.h"

namespace hg::kernels::math {

// One pooling: planes = N * C, input H x W, output OH x OW. Output (oh, ow)'s window starts at
// row oh * stride - padding (column likewise) in input coordinates and is kernel x kernel; the
// rows outside [0, H) are padding, which a max skips and an average counts as zeros when
// count_include_pad (PyTorch's rules).
struct PoolGeometry {
  int64_t planes, H, W, OH, OW, kernel, stride, padding;
  bool count_include_pad;
};

// PyTorch's output size: floor((in + 2 padding - kernel) / stride) + 1, or the ceiling with
// ceil_mode -- but a last window that would start in the right padding is dropped.
inline int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  const int64_t span = in + 2 * padding - kernel;
  int64_t out = (ceil_mode ? span + stride - 1 : span) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

inline PoolGeometry pool_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kernel, int64_t stride,
                                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true) {
  return {N * C, H, W, pooled_size(H, kernel, stride, padding, ceil_mode), pooled_size(W, kernel, stride, padding, ceil_mode),
          kernel, stride, padding, count_include_pad};
}

// Whether every window lies inside the input (no padding, no ceil_mode overhang): the fast paths.
inline bool windows_inside(const PoolGeometry& g) {
  return g.padding == 0 && (g.OH - 1) * g.stride + g.kernel <= g.H && (g.OW - 1) * g.stride + g.kernel <= g.W;
}

// The rows (or columns) of window o: it starts at `start` (possibly negative: padding); its
// elements inside the input are [begin, end); `padded` is its length cut at the right padding's
// end, what an average with count_include_pad divides by (PyTorch's pool_size).
struct WindowSpan {
  int64_t start, begin, end, padded;
};

HG_HD WindowSpan window_span(int64_t o, int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t start = o * stride - padding;
  const int64_t stop = start + kernel;
  const int64_t padded_stop = stop < in + padding ? stop : in + padding;
  return {start, start > 0 ? start : 0, stop < in ? stop : in, padded_stop - start};
}

// max_pool2d scans a window in order and keeps the best value and its index: value v replaces
// the best b if larger or NaN (v != v only for NaN), and once the best is NaN (b != b) nothing
// replaces it. So NaN wins, then the first maximum. NOTE: bitwise & and | on the comparisons
// keep the CPU loops free of branches (they vectorise).
template <class A>
HG_HD bool max_pool_takes(A best, A v) {
  return ((v > best) | (v != v)) & (best == best);
}

// The maximum of the part of a window inside the input (scanned row by row) and its index counted
// from the window's corner, padding included. `widen` converts an element to A (the devices
// convert 16-bit values each their own way).
template <class A>
struct WindowMax {
  A best;
  int64_t at;
};

template <class A, class T, class Widen>
HG_HD WindowMax<A> window_max(const T* plane, int64_t W, int64_t kernel, const WindowSpan& rows, const WindowSpan& cols,
                              Widen widen) {
  WindowMax<A> m{widen(plane[rows.begin * W + cols.begin]), (rows.begin - rows.start) * kernel + (cols.begin - cols.start)};
  for (int64_t h = rows.begin; h < rows.end; ++h)
    for (int64_t w = cols.begin; w < cols.end; ++w) {
      const A v = widen(plane[h * W + w]);
      if (max_pool_takes(m.best, v)) m.best = v, m.at = (h - rows.start) * kernel + (w - cols.start);
    }
  return m;
}

// The sum of the elements of rows [h0, h1) x columns [w0, w1), row by row.
template <class A, class T, class Widen>
HG_HD A window_sum(const T* plane, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1, Widen widen) {
  A total = 0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) total += widen(plane[h * W + w]);
  return total;
}

// avg_pool2d's weight of each value of a window of `count` elements (a multiply by 1/count, the
// same on both devices).
template <class A>
HG_HD A avg_pool_weight(int64_t count) {
  return A(1) / A(count);
}

// The elements a window averages over: kernel^2 inside the input, else as count_include_pad says.
HG_HD int64_t avg_pool_count(const WindowSpan& rows, const WindowSpan& cols, bool count_include_pad) {
  return count_include_pad ? rows.padded * cols.padded : (rows.end - rows.begin) * (cols.end - cols.begin);
}

// adaptive_avg_pool2d's bins (PyTorch's): output o of `out` covers input [floor(o * in / out),
// ceil((o + 1) * in / out)), so the bins tile the input and neighbours may share an element.
HG_HD int64_t adaptive_begin(int64_t o, int64_t in, int64_t out) { return o * in / out; }
HG_HD int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }
// The bins that contain input element i: [floor(i * out / in), ceil((i + 1) * out / in) - 1].
HG_HD int64_t adaptive_first_bin(int64_t i, int64_t in, int64_t out) { return i * out / in; }
HG_HD int64_t adaptive_last_bin(int64_t i, int64_t in, int64_t out) {
  const int64_t last = ((i + 1) * out + in - 1) / in - 1;
  return last < out - 1 ? last : out - 1;
}

// adaptive_max_pool2d's bin [h0, h1) x [w0, w1): its maximum by max_pool_takes's rule (NaN wins,
// then the first maximum) and where it is in the plane, h * W + w (PyTorch's indices).
template <class A, class T, class Widen>
HG_HD WindowMax<A> bin_max(const T* plane, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1, Widen widen) {
  WindowMax<A> m{widen(plane[h0 * W + w0]), h0 * W + w0};
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const A v = widen(plane[h * W + w]);
      if (max_pool_takes(m.best, v)) m.best = v, m.at = h * W + w;
    }
  return m;
}

}  // namespace hg::kernels::math
