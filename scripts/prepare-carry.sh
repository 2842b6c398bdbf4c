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
#   include/zlib.h, include/zconf.h  lib/libz.a (position-independent: links into libhalfgrad.so)
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

# ---- zlib: headers + the static library -------------------------------------------------------
copy /usr/include/zlib.h "$dest/include/"
copy /usr/include/zconf.h "$dest/include/"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
if [[ -f /usr/lib/$multiarch/libz.a ]]; then
  # Debian's libz.a is position-independent (no R_X86_64_32 relocations), so it links into the
  # shared libhalfgrad.so; the GPU machine then needs no libz.so development symlink.
  if readelf -r "/usr/lib/$multiarch/libz.a" 2>/dev/null | grep -qE 'R_X86_64_32S? '; then
    echo "prepare-carry: warning: libz.a has absolute relocations; linking it into a shared library may fail" >&2
  fi
  copy "/usr/lib/$multiarch/libz.a" "$dest/lib/"
else
  # Only the shared library: copy it with its symlinks (the .so link is what the linker finds).
  for f in /usr/lib/"$multiarch"/libz.so*; do
    cp -aL "$f" "$dest/lib/" && copied+=("$f -> lib/")
  done
fi

# ---- summary --------------------------------------------------------------------------------
echo "prepare-carry: copied into $dest:"
printf '  %s\n' "${copied[@]}"
size_kib=$(du -sk "$dest" | cut -f1)
echo "prepare-carry: $(du -sh "$dest" | cut -f1) in $(find "$dest" -type f | wc -l) files (limit for everything carried: ${limit_mib} MiB)"
(( size_kib < limit_mib * 1024 / 2 )) || die "$dest is ${size_kib} KiB: too close to the ${limit_mib} MiB carry limit"
echo "prepare-carry: name it in the device tool's carry list: carry: [\".carry\"]"
