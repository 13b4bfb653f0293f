"""bench/ncu_table.py: the table that bench/ncu-conv1d.sh and bench/ncu-scan.sh print.

    python3 bench/ncu_table.py OUT_DIR
    python3 bench/ncu_table.py --metrics     (the list to pass to ncu --metrics)

Reads every OUT_DIR/ncu-*.csv (Nsight Compute's raw page, one row per profiled launch) and
prints per launch the numbers that matter (time, bytes, occupancy, issue activity, pipes,
registers) and its four largest stall reasons in cycles per issued instruction."""
import csv, glob, os, sys

METRICS = (
    'gpu__time_duration.sum,'
    'launch__grid_size,'
    'launch__block_size,'
    'launch__waves_per_multiprocessor,'
    'launch__occupancy_limit_shared_mem,'
    'dram__bytes_read.sum,'
    'dram__bytes_write.sum,'
    'dram__throughput.avg.pct_of_peak_sustained_elapsed,'
    'sm__warps_active.avg.pct_of_peak_sustained_active,'
    'smsp__issue_active.avg.pct_of_peak_sustained_active,'
    'launch__registers_per_thread,'
    'launch__occupancy_limit_registers,'
    'smsp__inst_executed.sum,'
    'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,'
    'sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,'
    'lts__t_sectors_srcunit_tex_op_read.sum,'
    'l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,'
    'smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,'
    'smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,'
    'smsp__average_warp_latency_issue_stalled_wait.ratio,'
    'smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,'
    'smsp__average_warp_latency_issue_stalled_barrier.ratio,'
    'smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,'
    'smsp__average_warp_latency_issue_stalled_not_selected.ratio,'
    'smsp__average_warp_latency_issue_stalled_selected.ratio,'
    'smsp__average_warp_latency_issue_stalled_drain.ratio,'
    'smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,'
    'smsp__average_warp_latency_issue_stalled_no_instruction.ratio,'
    'smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio'
)
if sys.argv[1] == '--metrics':
    print(METRICS)
    sys.exit(0)
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
