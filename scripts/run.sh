#!/usr/bin/env bash
# First command on a fresh machine: installs what is missing, builds Release and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO
cmake --build build -j "$(nproc)"
./build/examples/01_tensors_and_autograd
