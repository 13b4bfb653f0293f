# shellcheck shell=bash
# bench/ncu-common.sh: what bench/ncu-conv1d.sh and bench/ncu-scan.sh share; sourced, not run.
#
#   ncu_prepare BUILD_DIR TARGET
#
# From the repository root: makes $OUT (./gpu-out when unset), builds TARGET (Release, CUDA,
# tests and examples off) into BUILD_DIR when it has none, and sets METRICS to the list
# bench/ncu_table.py reads. Returns non-zero, with the build log's end printed, when the build
# fails.
ncu_prepare() {
    local build=$1 target=$2
    OUT=${OUT:-./gpu-out}
    mkdir -p "$OUT"
    if [ ! -x "$build/bench/$target" ] && ! {
        cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF \
            > "$OUT/ncu-build.log" 2>&1 &&
            cmake --build "$build" --target "$target" -j "$(nproc)" >> "$OUT/ncu-build.log" 2>&1
    }; then
        tail -30 "$OUT/ncu-build.log"
        return 1
    fi
    # shellcheck disable=SC2034 # read by the script that sources this file
    METRICS=$(python3 bench/ncu_table.py --metrics)
}
