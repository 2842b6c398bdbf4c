#!/usr/bin/env bash
# First command on a fresh machine: installs what is missing, builds Release, then trains the
# CNN on Fashion-MNIST for 2 epochs with mixed precision (bf16 on the CPU, f16 on a GPU) and
# prints the results; outputs (metrics.csv, model, checkpoint, plot) go to runs/cnn/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing gnuplot-nox

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO -DHG_NATIVE=ON
cmake --build build -j "$(nproc)" --target hg-train
./build/examples/hg-train --model cnn --epochs 2 --precision amp --device auto --out runs/cnn "$@"
