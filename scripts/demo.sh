#!/usr/bin/env bash
# Builds tapegrad and trains the demo: a small Mamba language model learns Selective
# Copying (examples/train_selective_copy.c), on the GPU when there is one, else on the CPU.
# Arguments go to the program (e.g. --seed 2, --device cpu, --steps 2000; --help lists
# them). The run's log is build/demo.csv; `bash scripts/plot.sh build/demo.csv` draws it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The CUDA backend takes long to compile: build it only when there is a GPU to run it.
cuda=OFF
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    cuda=AUTO
fi
cmake -S . -B build -DTG_CUDA=$cuda > /dev/null
cmake --build build -j "$(nproc)" --target train_selective_copy
source scripts/blas-coretype.sh build/train_selective_copy
./build/train_selective_copy --device auto --csv build/demo.csv "$@"
