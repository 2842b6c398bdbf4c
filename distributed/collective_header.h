// The header every collective exchanges (an all_gather of 16 int64 per rank) before it moves any
// data: which collective, its number in the sequence, dtype, shape, reduce op or root, device.
// If the ranks disagree, the collective fails on every rank alike, with a message naming each
// rank's call, instead of MPI matching different buffers (undefined behaviour: corrupted memory
// or a hang). Every rank sees all headers, so all of them throw the same error and stay in step.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace hg::distributed::detail {

enum class Collective : int64_t { AllReduce = 1, Broadcast = 2, AllGather = 3, Barrier = 4 };

inline constexpr int kHeaderWords = 16;
using Header = std::array<int64_t, kHeaderWords>;

// `argument`: the reduce op (all_reduce) or the root (broadcast); `tensor` may be undefined (barrier).
Header make_header(Collective kind, int64_t sequence, const Tensor& tensor, int64_t argument);
Header all_reduce_header(int64_t sequence, const Tensor& tensor, AllReduceOptions options);

// "all_reduce #3 of f32 [4, 3] on cpu (sum, average)"
std::string describe(const Header& header);

// `gathered` holds world_size headers in rank order. Empty when they agree; otherwise the error
// message, naming `rank`'s call and every rank that differs from rank 0.
std::string check_headers(const std::vector<int64_t>& gathered, int world_size, int rank);

}  // namespace hg::distributed::detail
