# Optional CUDA backend. HG_CUDA=AUTO turns it on when nvcc is found on PATH or at
# /usr/local/cuda/bin/nvcc; ON requires it; OFF skips it. Never uses the "native" architecture
# (configure must work on a machine without a GPU) and never links libcuda directly (cudart
# dlopens it, so a CUDA build still starts where no driver is installed).
set(HG_WITH_CUDA OFF)
if(NOT HG_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(HG_NVCC nvcc HINTS /usr/local/cuda/bin)
    if(HG_NVCC)
      set(CMAKE_CUDA_COMPILER ${HG_NVCC})
    endif()
  endif()
  # One runtime only: the default (Static) would add cudart_static next to CUDA::cudart.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # NOTE: CMake 3.25 does not know nvcc's C++20 flag (nvcc 12+ has it); teach it, so the
    # library's cxx_std_20 requirement also applies to its .cu files.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    find_path(CUDNN_INCLUDE_DIR cudnn.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu)
    find_library(CUDNN_LIBRARY cudnn
      HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
    if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
      message(FATAL_ERROR "halfgrad: CUDA found but cuDNN not (set CUDNN_INCLUDE_DIR / CUDNN_LIBRARY)")
    endif()
    add_library(CUDNN::cudnn UNKNOWN IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
    set(HG_WITH_CUDA ON)
    message(STATUS "halfgrad: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${CUDNN_LIBRARY})")
  elseif(HG_CUDA STREQUAL "ON")
    message(FATAL_ERROR "halfgrad: HG_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
if(NOT HG_WITH_CUDA)
  message(STATUS "halfgrad: CUDA backend OFF (CPU only)")
endif()
