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
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
if [ ! -x "$build/bench/conv1d_bench" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DTG_BUILD_TESTS=OFF -DTG_BUILD_EXAMPLES=OFF \
        > "$OUT/ncu-build.log" 2>&1 && cmake --build "$build" --target conv1d_bench -j "$(nproc)" >> "$OUT/ncu-build.log" 2>&1 ||
        { tail -30 "$OUT/ncu-build.log"; exit 1; }
fi
ROWS=${ROWS:-"16x1536x16384 bf16 cf 4;16x1536x16384 f32 cf 4;16x1536x16384 bf16 cl 4;8x1536x2048 bf16 cf 4"}
METRICS=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__waves_per_multiprocessor,launch__occupancy_limit_shared_mem,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,smsp__inst_executed.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,smsp__average_warp_latency_issue_stalled_drain.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_no_instruction.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio
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
python3 - "$OUT" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
short = {
    'gpu__time_duration.sum': 'us', 'launch__grid_size': 'grid', 'launch__block_size': 'block',
    'launch__waves_per_multiprocessor': 'waves', 'launch__occupancy_limit_shared_mem': 'smem-limit',
    'dram__bytes_read.sum': 'rd MB', 'dram__bytes_write.sum': 'wr MB',
    'dram__throughput.avg.pct_of_peak_sustained_elapsed': 'dram%', 'sm__warps_active.avg.pct_of_peak_sustained_active': 'occ%',
    'smsp__issue_active.avg.pct_of_peak_sustained_active': 'issue%', 'launch__registers_per_thread': 'regs',
    'smsp__inst_executed.sum': 'Minstr', 'sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active': 'xu%',
    'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active': 'fma%',
}
stalls = 'smsp__average_warp_latency_issue_stalled_'
for path in sorted(glob.glob(os.path.join(out, 'ncu-*.csv'))):
    rows = list(csv.reader(open(path)))
    head = next((i for i, r in enumerate(rows) if r and r[0] == 'ID'), None)
    if head is None:
        print(os.path.basename(path), 'no data'); continue
    names, units = rows[head], rows[head + 1]
    print('==', os.path.basename(path)[4:-4])
    for r in rows[head + 2:]:
        rec = dict(zip(names, r))
        kname = rec.get('Kernel Name', '?').split('(')[0].split('::')[-1][:40]
        def val(k):
            v = rec.get(k, '').replace(',', '')
            try: return float(v)
            except ValueError: return float('nan')
        parts = []
        for k, label in short.items():
            v = val(k)
            u = units[names.index(k)] if k in names else ''
            if label == 'us': v = v / 1000 if u in ('nsecond', 'ns') else v * 1000 if u in ('msecond', 'ms') else v
            if label.endswith('MB'): v = v / 1e6 if u == 'byte' else v * 1e3 if u == 'Gbyte' else v
            if label == 'Minstr': v = v / 1e6
            parts.append(f'{label} {v:.1f}' if v == v else f'{label} -')
        top = sorted(((val(k), k[len(stalls):-6]) for k in names if k.startswith(stalls)), reverse=True)[:4]
        print(f'  {kname:40s}', ' | '.join(parts))
        print('    stalls (cycles/issue):', ', '.join(f'{n} {v:.1f}' for v, n in top if v == v))
PY
