// The strided copy-and-convert kernel (CPU) and the routing of copies between devices.
#include "core/copy.h"

#include <cstring>

#include "core/convert.h"
#include "core/cuda/cuda_copy.h"
#include "core/loops.h"
#include "core/parallel.h"

namespace hg::detail {

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  const int offset = shape.ndim() - t.dim();
  for (int d = 0; d < t.dim(); ++d) strides[offset + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return strides;
}

namespace {

template <class To, class From>
void convert_run(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n, Float8Overflow overflow) {
  if constexpr (is_float8_type_v<To> && !std::is_same_v<To, From>) {
    // The one conversion with an option: FP8's overflow rule.
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(dst + i * dst_step) =
          To(double(Acc<From>(*reinterpret_cast<const From*>(src + i * src_step))), overflow);
    return;
  }
  if (dst_step == sizeof(To) && src_step == sizeof(From)) {
    To* d = reinterpret_cast<To*>(dst);
    const From* s = reinterpret_cast<const From*>(src);
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(d, s, size_t(n) * sizeof(To));
    } else if constexpr (std::is_same_v<From, float> && (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>)) {
      convert_from_float(s, d, size_t(n));
    } else if constexpr (std::is_same_v<To, float> && (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>)) {
      convert_to_float(s, d, size_t(n));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = convert_value<To>(s[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<To*>(dst + i * dst_step) = convert_value<To>(*reinterpret_cast<const From*>(src + i * src_step));
}

// The same elements seen as u8: for an 8-bit dtype, the strides and offset stay valid in bytes.
Tensor bytes_view(const Tensor& t) {
  Tensor view = alias(t, t.shape(), t.strides(), t.storage_offset());
  view.impl()->dtype = u8;
  return view;
}

void copy_into_cpu(const Tensor& dst, const Tensor& src, Float8Overflow overflow) {
  const StridedWalk<2> walk(dst.shape(), {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                            {dst.strides(), broadcast_strides(src, dst.shape())},
                            {int64_t(element_size(dst.dtype())), int64_t(element_size(src.dtype()))});
  visit_any_dtype(dst.dtype(), [&]<class To> {
    visit_any_dtype(src.dtype(), [&]<class From> {
      parallel_for(0, walk.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        walk.walk(begin, end, [&](std::array<char*, 2> p, int64_t n, std::array<int64_t, 2> step) {
          convert_run<To, From>(p[0], step[0], p[1], step[1], n, overflow);
        });
      });
    });
  });
}

}  // namespace

void copy_into(const Tensor& dst, const Tensor& src, Float8Overflow overflow) {
  HG_CHECK(src.dim() <= dst.dim() && broadcast_shapes(dst.shape(), src.shape(), "copy_") == dst.shape(),
           "copy_: source of shape ", src.shape(), " cannot be broadcast to destination shape ", dst.shape());
  if (dst.numel() == 0) return;
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) return copy_into_cpu(dst, src, overflow);
  if (is_float8(dst.dtype()) || is_float8(src.dtype())) {
    // NOTE: the device copy kernel has no FP8 conversions: an FP8 copy on a GPU moves its bytes
    // as u8 (an FP8 element is one byte), and a conversion to or from FP8 runs on the host.
    if (dst.dtype() == src.dtype() && dd == sd) return cuda_copy_into(bytes_view(dst), bytes_view(src));
    if (dst.dtype() != src.dtype()) {
      Tensor host_src = empty(src.shape(), {.dtype = src.dtype()});
      copy_into(host_src, src);
      Tensor host_dst = empty(dst.shape(), {.dtype = dst.dtype()});
      copy_into_cpu(host_dst, host_src, overflow);
      return copy_into(dst, host_dst);
    }
  }
  if (dd == sd) return cuda_copy_into(dst, src);
  // Between devices: bring src to dst's dtype and shape, contiguous, on its own side, then move
  // the bytes; a strided destination gets a contiguous staging buffer on its device.
  const bool direct = src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous();
  const Tensor staged_src = direct ? src : [&] {
    Tensor t = empty(dst.shape(), {.dtype = dst.dtype(), .device = sd});
    copy_into(t, src);
    return t;
  }();
  const Tensor landing = dst.is_contiguous() ? dst : empty(dst.shape(), {.dtype = dst.dtype(), .device = dd});
  copy_bytes(landing.raw_data(), dd, staged_src.raw_data(), sd,
             staged_src.numel() * int64_t(element_size(dst.dtype())));
  if (!landing.is_same(dst)) copy_into(dst, landing);
}

Tensor dense_copy(const Tensor& t) {
  Tensor out = empty(t.shape(), t.options());
  copy_into(out, t);
  return out;
}

Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : dense_copy(t); }

Tensor dense_view(const Tensor& t, Shape shape) {
  HG_CHECK(t.is_contiguous() && checked_numel(shape, "dense_view") == t.numel(), "internal error: dense_view of a ", t.shape(),
           " tensor as ", shape);
  Shape strides = contiguous_strides(shape);
  return alias(t, std::move(shape), std::move(strides), t.storage_offset());
}

Tensor transposed_view(const Tensor& t) {
  const int n = t.dim();
  HG_CHECK(n >= 2, "internal error: transposed_view of a ", n, "-D tensor");
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return alias(t, std::move(shape), std::move(strides), t.storage_offset());
}

}  // namespace hg::detail
