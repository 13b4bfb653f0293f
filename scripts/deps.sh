#!/usr/bin/env bash
# Installs what tapegrad needs to build and test on Debian or Ubuntu (skips what is there):
# the build tools and libraries, Open MPI (data-parallel training, tapegrad/dist.h), clang
# with libFuzzer (scripts/fuzz.sh), clang-format (scripts/format.sh), python3 with numpy
# and safetensors for the interoperability test (tests/python), and, where the CUDA toolkit
# is installed, NCCL from its PyPI wheel (data parallelism on GPUs; CMake finds it there).
set -euo pipefail
packages=(build-essential cmake pkg-config libopenblas-dev libcriterion-dev libcjson-dev
          clang libclang-rt-dev clang-format python3 python3-pip libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" > /dev/null
fi
# From PyPI, into the python3 that comes first on PATH (the one the tests run).
if ! python3 -c "import numpy, safetensors" 2> /dev/null; then
    echo "installing: numpy safetensors (pip)"
    python3 -m pip install --quiet --break-system-packages numpy safetensors 2> /dev/null ||
        python3 -m pip install --quiet numpy safetensors
fi
if { command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
    ! python3 -c "import nvidia.nccl" 2> /dev/null; then
    echo "installing: nvidia-nccl-cu13 (pip)"
    python3 -m pip install --quiet --break-system-packages nvidia-nccl-cu13 2> /dev/null ||
        python3 -m pip install --quiet nvidia-nccl-cu13
fi
