// Building, printing and comparing collective headers (see collective_header.h).
#include "distributed/collective_header.h"

#include <algorithm>
#include <sstream>

namespace hg::distributed::detail {

namespace {

// Word layout: 0 kind, 1 sequence, 2 dtype, 3 argument, 4 device type, 5 unused, 6 ndim,
// 7 numel, 8..14 the first 7 dims, 15 a hash of any dims beyond them. The device index is left
// out: ranks on one machine use different GPUs.
constexpr int kFirstDim = 8, kDimWords = 7;

const char* kind_name(int64_t kind) {
  switch (Collective(kind)) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllGather: return "all_gather";
    case Collective::Barrier: return "barrier";
  }
  return "unknown collective";
}

const char* op_name(int64_t op) {
  switch (ReduceOp(op)) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

}  // namespace

Header make_header(Collective kind, int64_t sequence, const Tensor& tensor, int64_t argument) {
  Header h{};
  h[0] = int64_t(kind);
  h[1] = sequence;
  h[3] = argument;
  if (!tensor.defined()) return h;
  h[2] = int64_t(tensor.dtype());
  h[4] = int64_t(tensor.device().type());
  h[6] = tensor.dim();
  h[7] = tensor.numel();
  uint64_t rest = 0;
  for (int d = 0; d < tensor.dim(); ++d) {
    if (d < kDimWords) h[size_t(kFirstDim + d)] = tensor.shape()[d];
    else rest = (rest ^ uint64_t(tensor.shape()[d])) * 1099511628211ull;  // FNV-style mix
  }
  h[15] = int64_t(rest >> 1);
  return h;
}

Header all_reduce_header(int64_t sequence, const Tensor& tensor, AllReduceOptions options) {
  return make_header(Collective::AllReduce, sequence, tensor, int64_t(options.op) * 2 + (options.average ? 1 : 0));
}

std::string describe(const Header& h) {
  std::ostringstream os;
  const auto kind = Collective(h[0]);
  os << kind_name(h[0]) << " #" << h[1];
  if (kind == Collective::Barrier) return os.str();
  os << " of " << dtype_name(DType(h[2])) << " [";
  for (int64_t d = 0; d < h[6]; ++d) {
    if (d) os << ", ";
    if (d < kDimWords) os << h[size_t(kFirstDim + d)];
    else { os << "..."; break; }
  }
  os << "] on " << (h[4] == int64_t(DeviceType::CUDA) ? "cuda" : "cpu");
  if (kind == Collective::AllReduce) os << " (" << op_name(h[3] / 2) << (h[3] % 2 ? ", average" : "") << ")";
  if (kind == Collective::Broadcast) os << " (root " << h[3] << ")";
  return os.str();
}

std::string check_headers(const std::vector<int64_t>& gathered, int world_size, int rank) {
  const auto header_of = [&](int r) {
    Header h;
    std::copy_n(gathered.begin() + int64_t(r) * kHeaderWords, kHeaderWords, h.begin());
    return h;
  };
  const Header first = header_of(0);
  std::vector<int> differing;
  for (int r = 1; r < world_size; ++r)
    if (header_of(r) != first) differing.push_back(r);
  if (differing.empty()) return {};
  std::ostringstream os;
  os << "hg::distributed: " << describe(header_of(rank)) << " on rank " << rank << " of " << world_size
     << ": the ranks called different collectives or passed different tensors: rank 0: " << describe(first);
  for (size_t i = 0; i < differing.size() && i < 8; ++i)
    os << "; rank " << differing[i] << ": " << describe(header_of(differing[i]));
  if (differing.size() > 8) os << "; ... (" << differing.size() - 8 << " more ranks differ)";
  os << ". Every rank must call the same collectives in the same order with tensors of the same shape, "
        "dtype and device type. Nothing was exchanged; the group is still usable.";
  return os.str();
}

}  // namespace hg::distributed::detail
