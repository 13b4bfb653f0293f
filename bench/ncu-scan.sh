#!/usr/bin/env bash
# bench/ncu-scan.sh: hardware counters of the selective scan kernels for a few benchmark rows.
#
#   source .device-debs/env.sh && bash bench/ncu-scan.sh [build-dir]
#
# Builds scan_bench (Release, CUDA, sm_90) when the build directory has none, then runs
# Nsight Compute, clocks left alone, on the second forward launch and the first backward
# launch of each row (ROWS: "BxDxNxL dtype" separated by ';'); the table of
# bench/ncu_table.py is printed last. For the first row it also takes the full set of
# sections, and writes its details page and its SASS with the stall samples of every
# instruction (full-<kernel>.txt, sass-<kernel>.csv) to $OUT (./gpu-out without OUT).
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
# shellcheck source=bench/ncu-common.sh
source bench/ncu-common.sh
ncu_prepare "$build" scan_bench || exit 1
ROWS=${ROWS:-"8x1536x16x2048 bf16;8x1536x16x2048 f32;8x128x16x256 bf16"}
IFS=';' read -ra rows <<< "$ROWS"
for row in "${rows[@]}"; do
    read -r size dtype <<< "$row"
    for kernel in fwd bwd; do
        skip=$([ "$kernel" = fwd ] && echo 1 || echo 0) # the forward's first launch warms up
        ncu --clock-control none -k "regex:scan_${kernel}_kernel" --launch-skip "$skip" --launch-count 1 \
            --metrics "$METRICS" --csv --page raw \
            "$build/bench/scan_bench" --quick --size "$size" --dtype "$dtype" \
            > "$OUT/ncu-$size-$dtype-$kernel.csv" 2> "$OUT/ncu-$size-$dtype-$kernel.err" ||
            { echo "ncu failed on $size $dtype $kernel"; tail -5 "$OUT/ncu-$size-$dtype-$kernel.err"; }
    done
done
read -r size dtype <<< "${rows[0]}"
for kernel in fwd bwd; do
    skip=$([ "$kernel" = fwd ] && echo 1 || echo 0)
    report="$OUT/full-$kernel"
    if ncu --clock-control none --set full -k "regex:scan_${kernel}_kernel" --launch-skip "$skip" --launch-count 1 \
        -f -o "$report" "$build/bench/scan_bench" --quick --size "$size" --dtype "$dtype" > "$report.log" 2>&1; then
        ncu --import "$report.ncu-rep" --page details > "$OUT/full-$kernel.txt" 2>&1
        ncu --import "$report.ncu-rep" --page source --csv --print-source sass > "$OUT/sass-$kernel.csv" 2>&1
        rm -f "$report.ncu-rep" "$report.log"
    else
        echo "ncu --set full failed on $size $dtype $kernel"
        tail -5 "$report.log"
    fi
done
python3 bench/ncu_table.py "$OUT"
