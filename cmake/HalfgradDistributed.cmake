# Optional distributed training (distributed/). HG_DISTRIBUTED=AUTO turns it on when MPI is found
# (Debian: libopenmpi-dev openmpi-bin); ON requires MPI; OFF builds stubs whose entry points throw
# hg::Error("... built without distributed support"). With CUDA on as well, NCCL (shipped with the
# CUDA toolkit) carries CUDA tensors; it is found under the toolkit, never required.
# Sets HG_WITH_DISTRIBUTED, HG_WITH_NCCL, HG_DISTRIBUTED_SOURCES and the NCCL::nccl target.
set(HG_WITH_DISTRIBUTED OFF)
set(HG_WITH_NCCL OFF)
if(NOT HG_DISTRIBUTED STREQUAL "OFF")
  if(HG_DISTRIBUTED STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(HG_WITH_DISTRIBUTED ON)
  endif()
endif()

if(HG_WITH_DISTRIBUTED AND HG_WITH_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set(HG_WITH_NCCL ON)
  endif()
endif()

# The backend-neutral part (ProcessGroup, DataParallel) always builds; each backend or its stub.
file(GLOB HG_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/distributed/*.cpp)
if(HG_WITH_DISTRIBUTED)
  list(APPEND HG_DISTRIBUTED_SOURCES ${PROJECT_SOURCE_DIR}/distributed/mpi/mpi_backend.cpp)
else()
  list(APPEND HG_DISTRIBUTED_SOURCES ${PROJECT_SOURCE_DIR}/distributed/stubs/no_mpi.cpp)
endif()
if(HG_WITH_NCCL)
  list(APPEND HG_DISTRIBUTED_SOURCES ${PROJECT_SOURCE_DIR}/distributed/nccl/nccl_backend.cpp)
else()
  list(APPEND HG_DISTRIBUTED_SOURCES ${PROJECT_SOURCE_DIR}/distributed/stubs/no_nccl.cpp)
endif()

# Only the backend files include mpi.h / nccl.h: every other file compiles the same with or
# without MPI (the same ccache entries; no MPI header can leak into the rest of the library).
if(HG_WITH_DISTRIBUTED)
  set_source_files_properties(${PROJECT_SOURCE_DIR}/distributed/mpi/mpi_backend.cpp PROPERTIES
    INCLUDE_DIRECTORIES "$<TARGET_PROPERTY:MPI::MPI_CXX,INTERFACE_INCLUDE_DIRECTORIES>")
endif()
if(HG_WITH_NCCL)
  set_source_files_properties(${PROJECT_SOURCE_DIR}/distributed/nccl/nccl_backend.cpp PROPERTIES
    INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()

if(HG_WITH_DISTRIBUTED)
  message(STATUS "halfgrad: distributed ON (MPI ${MPI_CXX_VERSION}, mpiexec ${MPIEXEC_EXECUTABLE}; NCCL ${HG_WITH_NCCL})")
else()
  message(STATUS "halfgrad: distributed OFF (install libopenmpi-dev openmpi-bin for multi-process training)")
endif()
