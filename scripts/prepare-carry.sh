#!/usr/bin/env bash
# prepare-carry.sh: copies the third-party headers (and zlib's static library) that halfgrad's
# build needs into the git-ignored folder .carry/, laid out as an install prefix, so that a machine
# without Debian's dev packages (the GPU machine: no network, no libeigen3-dev, doctest-dev,
# libcli11-dev, zlib1g-dev) can configure with
#
#   -DEigen3_DIR=.carry/share/eigen3/cmake  -Ddoctest_DIR=.carry/lib/cmake/doctest
#   -DCLI11_DIR=.carry/share/cmake/CLI11    -DZLIB_ROOT=.carry
#
# (scripts/gpu-check.sh adds these by itself for whichever package the system lacks).
# Run it here, on a machine with those packages installed, then name .carry in the device tool's
# `carry` list. Usage: scripts/prepare-carry.sh [DEST]   (default: <repo>/.carry)
#
# Layout (relative config files keep working wherever the folder lands):
#   include/eigen3/Eigen/...         share/eigen3/cmake/Eigen3Config.cmake (+ Targets, Version)
#   include/doctest/doctest.h        lib/cmake/doctest/doctestConfig.cmake (+ doctest.cmake, ...)
#   include/CLI/*.hpp                share/cmake/CLI11/CLI11Config.cmake (+ Version)
#   cudnn/include/cudnn*.h           (from /usr/local/cuda, if there: a fallback for a cuDNN wheel without headers)
#   include/zlib.h, include/zconf.h  lib/libz.so + lib/libz.so.1 (copies of libz.so.1.x; or lib/libz.a
#                                    when it is position-independent, so links into libhalfgrad.so)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.carry}
limit_mib=64

die() { echo "prepare-carry: $*" >&2; exit 1; }
need() { [[ -e $1 ]] || die "missing $1 (install $2 here: apt-get install -y --no-install-recommends $2)"; }

need /usr/include/eigen3/Eigen/Core libeigen3-dev
need /usr/share/eigen3/cmake/Eigen3Config.cmake libeigen3-dev
need /usr/include/doctest/doctest.h doctest-dev
need /usr/lib/cmake/doctest/doctestConfig.cmake doctest-dev
need /usr/include/CLI/CLI.hpp libcli11-dev
need /usr/share/cmake/CLI11/CLI11Config.cmake libcli11-dev
need /usr/include/zlib.h zlib1g-dev
need /usr/include/zconf.h zlib1g-dev

rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib/cmake" "$dest/share/eigen3" "$dest/share/cmake"

copied=()
copy() {  # copy SRC DEST_DIR: cp -a, recorded for the summary
  cp -a "$1" "$2"
  copied+=("$1 -> ${2#"$dest"/}")
}

# ---- Eigen 3.4 (header-only; Eigen/ only: halfgrad uses nothing from unsupported/) -----------
mkdir -p "$dest/include/eigen3"
copy /usr/include/eigen3/Eigen "$dest/include/eigen3/"
[[ -e /usr/include/eigen3/signature_of_eigen3_matrix_library ]] &&
  copy /usr/include/eigen3/signature_of_eigen3_matrix_library "$dest/include/eigen3/"
# Eigen3Config.cmake and Eigen3Targets.cmake compute the prefix from their own location (three
# folders up), so the copy needs no edit.
copy /usr/share/eigen3/cmake "$dest/share/eigen3/"

# ---- doctest (header-only) ------------------------------------------------------------------
copy /usr/include/doctest "$dest/include/"
copy /usr/lib/cmake/doctest "$dest/lib/cmake/"
# Debian's doctestTargets.cmake hard-codes `set(_IMPORT_PREFIX "/usr")`; make it relative to the
# file (lib/cmake/doctest -> three folders up), so doctest::doctest points into .carry/include.
targets=$dest/lib/cmake/doctest/doctestTargets.cmake
if grep -q 'set(_IMPORT_PREFIX "/usr")' "$targets"; then
  # shellcheck disable=SC2016  # ${CMAKE_CURRENT_LIST_DIR} is CMake's, not the shell's
  sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' "$targets"
  copied+=("(patched lib/cmake/doctest/doctestTargets.cmake: _IMPORT_PREFIX relative to the file)")
fi
grep -q '_IMPORT_PREFIX "/usr"' "$targets" && die "could not make $targets relocatable"

# ---- CLI11 (header-only) --------------------------------------------------------------------
copy /usr/include/CLI "$dest/include/"
copy /usr/share/cmake/CLI11 "$dest/share/cmake/"

# ---- zlib: headers + a library to link -------------------------------------------------------
copy /usr/include/zlib.h "$dest/include/"
copy /usr/include/zconf.h "$dest/include/"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
# libhalfgrad is a shared library, so a static libz.a only works when it is position-independent.
# Debian 12's is not ("relocation R_X86_64_PC32 against symbol `z_errmsg' can not be used when
# making a shared object"), so try the link and otherwise carry the shared library: its SONAME is
# libz.so.1, which every Linux system has at run time (zlib1g is essential).
zlib_static_links() {
  local tmp
  tmp=$(mktemp -d)
  echo 'int hg_probe(void) { return 0; }' >"$tmp/p.c"
  gcc -shared -fPIC -o "$tmp/p.so" "$tmp/p.c" -Wl,--whole-archive "$libdir/libz.a" -Wl,--no-whole-archive \
    >/dev/null 2>&1
  local rc=$?
  rm -rf "$tmp"
  return $rc
}
if [[ -f $libdir/libz.a ]] && zlib_static_links; then
  copy "$libdir/libz.a" "$dest/lib/"
else
  real=$(readlink -f "$libdir/libz.so" 2>/dev/null || true)
  [[ -f $real ]] || real=$(readlink -f "$libdir/libz.so.1")
  [[ -f $real ]] || die "no libz.so in $libdir (install zlib1g-dev)"
  # Plain copies, no symbolic links (the device tool carries a link as a link).
  cp "$real" "$dest/lib/libz.so"
  cp "$real" "$dest/lib/libz.so.1"
  copied+=("$real -> lib/libz.so, lib/libz.so.1 (libz.a is not position-independent)")
fi

# ---- cuDNN headers (a fallback only) -----------------------------------------------------------
# The GPU machine's cuDNN may come as the pip wheel nvidia-cudnn-cu13; should that wheel lack
# headers, gpu-check.sh compiles against these (cuDNN 9's legacy convolution API is stable within
# major version 9) and links the wheel's libcudnn.so.9.
cuda_inc=$(readlink -f /usr/local/cuda/include 2>/dev/null || true)
if [[ -n $cuda_inc && -f $cuda_inc/cudnn.h ]]; then
  mkdir -p "$dest/cudnn/include"
  cp "$cuda_inc"/cudnn*.h "$dest/cudnn/include/"
  copied+=("$cuda_inc/cudnn*.h -> cudnn/include/ ($(grep -hE '#define CUDNN_(MAJOR|MINOR) ' "$cuda_inc/cudnn_version.h" | awk '{printf "%s%s", sep, $3; sep="."}'))")
fi

# ---- summary --------------------------------------------------------------------------------
echo "prepare-carry: copied into $dest:"
printf '  %s\n' "${copied[@]}"
size_kib=$(du -sk "$dest" | cut -f1)
echo "prepare-carry: $(du -sh "$dest" | cut -f1) in $(find "$dest" -type f | wc -l) files (limit for everything carried: ${limit_mib} MiB)"
(( size_kib < limit_mib * 1024 / 2 )) || die "$dest is ${size_kib} KiB: too close to the ${limit_mib} MiB carry limit"
echo "prepare-carry: name it in the device tool's carry list: carry: [\".carry\"]"
