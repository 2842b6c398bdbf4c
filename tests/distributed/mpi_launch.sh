#!/bin/sh
# CTest's launcher for the multi-process tests (tests/distributed/CMakeLists.txt): runs a test
# program on 2 MPI ranks over loopback -- except when doctest only lists its test cases (test
# discovery at build time), which one plain process does.
# Usage: mpi_launch.sh <mpiexec> [mpirun options...] -- <program> [args...]
# Open MPI refuses to start as root (CI containers) unless told; --oversubscribe lets 2 ranks
# start on a machine with fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpiexec="$1"
shift
options=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  options="$options $1"
  shift
done
shift  # the "--"
for arg in "$@"; do
  case "$arg" in
    --list-test-cases | --list-test-suites) exec "$@" ;;
  esac
done
# shellcheck disable=SC2086 # options are separate words on purpose
exec "$mpiexec" -np 2 --oversubscribe $options "$@"
