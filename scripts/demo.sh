#!/usr/bin/env bash
# Builds tapegrad and runs the training demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build > /dev/null
cmake --build build -j "$(nproc)"
./build/train_shift "$@"
