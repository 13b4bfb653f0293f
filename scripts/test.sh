#!/usr/bin/env bash
# Builds tapegrad from scratch and runs the whole test suite.
#   scripts/test.sh             release build (CUDA code compiled when nvcc is found)
#   scripts/test.sh --sanitize  CPU-only build with AddressSanitizer and UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=build
flags=()
if [ "${1:-}" = "--sanitize" ]; then
    build=build-sanitize
    flags=(-DTG_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
rm -rf "$build"
cmake -S . -B "$build" "${flags[@]}" > /dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
