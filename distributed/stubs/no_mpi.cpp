// A build without MPI (-DHG_DISTRIBUTED=OFF, or AUTO without libopenmpi-dev): hg::distributed
// compiles and links, and init() explains what is missing.
#include "distributed/backend.h"

namespace hg::distributed::detail {

bool mpi_built() { return false; }

std::shared_ptr<GroupState> make_mpi_group(const InitOptions&) {
  HG_FAIL("hg::distributed::init: halfgrad was built without distributed support (install libopenmpi-dev "
          "openmpi-bin and configure with -DHG_DISTRIBUTED=ON)");
}

}  // namespace hg::distributed::detail
