// A build without NCCL (no CUDA, or no libnccl under the CUDA toolkit): collectives on CUDA
// tensors explain what is missing; CPU tensors still go over MPI.
#include "distributed/backend.h"

namespace hg::distributed::detail {

bool nccl_built() { return false; }

std::unique_ptr<Backend> make_nccl_backend(GroupState&, int device_index) {
  HG_FAIL("hg::distributed: a collective on cuda:", device_index, " needs NCCL, and this halfgrad was built without "
          "it (a CUDA build finds libnccl under the CUDA toolkit); reduce CPU tensors, or rebuild with CUDA and NCCL");
}

}  // namespace hg::distributed::detail
