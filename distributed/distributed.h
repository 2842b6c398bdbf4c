// hg::distributed: data-parallel training across processes and machines. ProcessGroup (MPI for
// CPU tensors, NCCL for CUDA tensors) and DataParallel; data::DistributedSampler shards the data.
#pragma once

#include "distributed/agreement.h"
#include "distributed/data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
