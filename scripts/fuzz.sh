#!/usr/bin/env bash
# Fuzzes the checkpoint loader: builds tests/fuzz with clang (libFuzzer, AddressSanitizer,
# UBSan), writes valid checkpoints as the seed corpus, and runs for a bounded time.
#   scripts/fuzz.sh [SECONDS]    default 60 (or $TG_FUZZ_SECONDS)
# A crash leaves its input in build-fuzz/artifacts/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${TG_FUZZ_SECONDS:-60}}
bash scripts/deps.sh
build=build-fuzz
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DTG_FUZZ=ON -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF \
    -DTG_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_checkpoint_load fuzz_checkpoint_seeds
corpus="$build/corpus"
mkdir -p "$corpus" "$build/artifacts"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/tests/fuzz/fuzz_checkpoint_seeds" "$corpus"
echo "fuzzing the checkpoint loader for ${seconds} s from $(ls "$corpus" | wc -l) seed files"
"$build/tests/fuzz/fuzz_checkpoint_load" -max_total_time="$seconds" -max_len=16384 -print_final_stats=1 \
    -dict=tests/fuzz/checkpoint.dict -artifact_prefix="$build/artifacts/" "$corpus"
