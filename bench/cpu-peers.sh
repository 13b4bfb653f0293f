#!/usr/bin/env bash
# bench/cpu-peers.sh: tapegrad's CPU training step beside PyTorch's on the same cores.
#
#   bash bench/cpu-peers.sh [options of bench/cpu_peers.py]
#
# Sets up PyTorch from PyPI in a virtual environment (.venv-peers, once; the CPU wheel
# from PyTorch's own index when it answers, else PyPI's default), builds train_bench
# without CUDA in build-cpu-peers, and runs bench/cpu_peers.py with them. Run it on a
# quiet machine: the two sides alternate, but anything else running shifts both.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-peers
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch" 2> /dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu 2> /dev/null ||
        "$venv/bin/pip" install -q torch
fi
cmake -S . -B build-cpu-peers -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=OFF > /dev/null
cmake --build build-cpu-peers -j "$(nproc)" --target train_bench > /dev/null
source scripts/blas-coretype.sh build-cpu-peers/bench/train_bench
"$venv/bin/python" bench/cpu_peers.py --train-bench build-cpu-peers/bench/train_bench "$@"
