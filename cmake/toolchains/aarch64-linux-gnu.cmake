# Cross-compiling halfgrad for 64-bit Arm Linux on an x86-64 Debian machine:
#   apt-get install g++-aarch64-linux-gnu qemu-user zlib1g-dev:arm64   (after dpkg --add-architecture arm64)
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DHG_NATIVE=OFF -DHG_CUDA=OFF
# Tests run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), so ctest works as on the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries (zlib) come from Debian's arm64 multiarch directory; header-only dependencies
# (Eigen, doctest) are shared with the host.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
