#!/usr/bin/env bash
# bench/ncu-conv1d.sh: hardware counters of the conv1d kernels for a few benchmark rows.
#
#   source .device-debs/env.sh && bash bench/ncu-conv1d.sh [build-dir]
#
# Builds conv1d_bench (Release, CUDA, sm_90) when the build directory has none, then runs
# Nsight Compute on one forward and one backward launch per row (the warm-up launches of
# the forward+backward measurement) with the clocks left alone. Each row's report goes to
# $OUT/ncu-<row>.txt (./gpu-out without OUT); a table of the numbers that matter for a
# bandwidth-bound kernel (time, DRAM bytes and throughput, occupancy, issue activity,
# registers, the top stall reasons) is printed last.
# ROWS overrides the rows: "size dtype layout width" separated by ';'. CACHE_CONTROL=none
# leaves the caches alone between profiled launches (ncu's default, all, flushes them and
# leaves each kernel's write-back of its output out of its time: the short rows then look
# faster than they run).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
# shellcheck source=bench/ncu-common.sh
source bench/ncu-common.sh
ncu_prepare "$build" conv1d_bench || exit 1
ROWS=${ROWS:-"16x1536x16384 bf16 cf 4;16x1536x16384 f32 cf 4;16x1536x16384 bf16 cl 4;8x1536x2048 bf16 cf 4"}
IFS=';' read -ra rows <<< "$ROWS"
for row in "${rows[@]}"; do
    read -r size dtype layout width <<< "$row"
    name="$size-$dtype-$layout-k$width"
    # --quick: 1 warm-up + 5 runs of the forward (6 launches), then the forward+backward's
    # warm-up: forward, backward, partial sum. Skip the first 6, profile the next 3.
    ncu --clock-control none --cache-control "${CACHE_CONTROL:-all}" -k 'regex:row_|tile_|stream_|sum_partials' --launch-skip 6 --launch-count 3 \
        --metrics "$METRICS" --csv --page raw \
        "$build/bench/conv1d_bench" --quick --size "$size" --dtype "$dtype" --layout "$layout" --width "$width" \
        > "$OUT/ncu-$name.csv" 2> "$OUT/ncu-$name.err" || { echo "ncu failed on $name"; tail -5 "$OUT/ncu-$name.err"; }
done
python3 bench/ncu_table.py "$OUT"
