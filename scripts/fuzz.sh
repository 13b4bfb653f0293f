#!/usr/bin/env bash
# Fuzzes the checkpoints: builds tests/fuzz with clang (libFuzzer, AddressSanitizer, UBSan),
# then runs two targets for a bounded time each: the loader on arbitrary bytes (seeded with
# valid checkpoints and the committed corpus) and the save → load round trip of parameter
# sets the fuzzer makes up.
#   scripts/fuzz.sh [SECONDS]    per target; default 60 (or $TG_FUZZ_SECONDS)
# A finding leaves its input in build-fuzz/artifacts/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${TG_FUZZ_SECONDS:-60}}
bash scripts/deps.sh
build=build-fuzz
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DTG_FUZZ=ON -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF \
    -DTG_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_checkpoint_load fuzz_checkpoint_seeds \
    fuzz_checkpoint_round_trip
corpus="$build/corpus"
mkdir -p "$corpus" "$build/artifacts"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/tests/fuzz/fuzz_checkpoint_seeds" "$corpus"
cp tests/data/checkpoints/*.safetensors "$corpus/" # the committed good and damaged files
echo "fuzzing the checkpoint loader for ${seconds} s from $(ls "$corpus" | wc -l) seed files"
"$build/tests/fuzz/fuzz_checkpoint_load" -max_total_time="$seconds" -max_len=16384 -print_final_stats=1 \
    -dict=tests/fuzz/checkpoint.dict -artifact_prefix="$build/artifacts/" "$corpus"
echo "fuzzing the save → load round trip for ${seconds} s"
mkdir -p "$build/corpus-round-trip"
"$build/tests/fuzz/fuzz_checkpoint_round_trip" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/" "$build/corpus-round-trip"
