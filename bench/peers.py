#!/usr/bin/env python3
"""PyTorch peers of bench/conv1d_bench.c: the same causal conv1d (bias, SiLU) on the same
sizes, dtypes and widths, timed the same way, so the two tables can be read side by side.

    python3 bench/peers.py [--csv FILE] [--quick] [--max-seconds S] [--no-graph]
                           [--sizes 8x1536x2048,...] [--ks 4,8] [--dtypes f32,bf16]
                           [--peers compiled,compiled-cl,cudnn,dao,dao-cl] [--peer-dir DIR]

Peers (each forward alone, under no_grad, and forward + backward):
  compiled     torch.compile of the shift-and-add form, channel-first x:
               out = silu(bias + sum_k w[:, k] * (x shifted right by K-1-k, zeros in front))
  compiled-cl  the same compiled form on a channel-last x: a (B, L, C) tensor viewed as (B, C, L)
  cudnn        F.conv1d(x, w.unsqueeze(1), bias, padding=K-1, groups=C)[..., :L], then SiLU
               (eager, channel-first)
  dao          Dao-AILab's causal-conv1d kernel (causal_conv1d_fn, activation "silu"), built from
               its source distribution into --peer-dir by bench/build_peers.py, channel-first x
  dao-cl       the same kernel on a channel-last x (its channel-last path)
  clone        torch.clone(x), the copy reference for each row (forward column only)
The dao peers are in the default list only when --peer-dir is given.
Forward + backward is torch.autograd.grad of the output with a random dout for (x, w, bias):
the gradients are returned, never summed into .grad, so no extra pass is timed.

Timing, as in the C benchmark: fresh random inputs; enough input sets, used in rotation, that
their x tensors alone exceed 4x the L2 cache; a warm-up (which also compiles); then each set's
call is captured in a CUDA graph and the graphs are replayed back to back with an event
between each two, and the median interval is reported (quartiles in the CSV). Graphs keep
Python and launch overhead out of the numbers. Where capture fails, or with --no-graph,
triton.testing.do_bench(return_mode="median") times the call instead (it clears the L2
between runs) and the CSV's method column says so. "% copy" is the bytes the floor counts
(forward 2*N*size, forward + backward 5*N*size) per second over the bandwidth of a 1 GiB
device-to-device clone measured at the start (bytes read + written).

The clones (the 1 GiB reference and the per-row clone column) are always timed with
do_bench, never in a graph: a clone is one cudaMemcpy, and captured in a CUDA graph such a
copy ran at about 2.7 TB/s for some sizes (512 MiB, 1 GiB, 1.6 GB, 2 GiB) and 4.2 TB/s for
others on the H200 here, against 4.2 TB/s for all of them outside a graph.
"""
import argparse
import csv
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing

SIZES = [(16, 1536, 16384), (8, 1536, 2048), (32, 768, 1024)]
KS = [2, 3, 4, 8]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
PEERS = ["compiled", "compiled-cl", "cudnn", "dao", "dao-cl"]
CHANNEL_LAST = {"compiled-cl", "dao-cl"}
dao_conv = None  # causal_conv1d_fn, once --peer-dir is read
L2_FALLBACK = 60 << 20


def shift_and_add(x, w, b):
    """bias + sum_k w[:, k] * x[..., t - (K-1) + k] with zeros left of t = 0, then SiLU."""
    K, L = w.shape[1], x.shape[-1]
    xp = F.pad(x, (K - 1, 0))
    acc = b[:, None]
    for k in range(K):
        acc = acc + w[:, k, None] * xp[..., k:k + L]
    return F.silu(acc)


def dao_causal_conv1d(x, w, b):
    return dao_conv(x, w, b, activation="silu")


def cudnn_conv(x, w, b):
    K, L = w.shape[1], x.shape[-1]
    return F.silu(F.conv1d(x, w.unsqueeze(1), b, padding=K - 1, groups=x.shape[1])[..., :L])


compiled_shift_and_add = torch.compile(shift_and_add, dynamic=False)


# ---- timing ------------------------------------------------------------------------------

class Options:
    max_runs = 100
    min_runs = 10
    warmup = 3
    budget_ms = 1500.0
    graphs = True


def runs_for(opts, one_run_ms):
    runs = opts.max_runs
    if one_run_ms > 0 and one_run_ms * runs > opts.budget_ms:
        runs = int(opts.budget_ms / one_run_ms)
    return max(opts.min_runs, runs)


def quantile(sorted_values, p):
    position = p * (len(sorted_values) - 1)
    below = int(position)
    if below >= len(sorted_values) - 1:
        return sorted_values[-1]
    frac = position - below
    return sorted_values[below] * (1 - frac) + sorted_values[below + 1] * frac


def time_graphs(calls, opts):
    """calls[i] runs on input set i. Returns (median, q1, q3) in microseconds and the runs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (and compilation) outside capture, as capture wants
        for call in calls:
            for _ in range(opts.warmup):
                call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs, keep = [], []
    for call in calls:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            keep.append(call())  # outputs stay alive with the graph that writes them
        graphs.append(graph)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for graph in graphs:
        graph.replay()
    start.record()
    graphs[0].replay()
    end.record()
    torch.cuda.synchronize()
    runs = runs_for(opts, start.elapsed_time(end))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(runs + 1)]
    events[0].record()
    for i in range(runs):
        graphs[(i + 1) % len(graphs)].replay()
        events[i + 1].record()
    torch.cuda.synchronize()
    us = sorted(events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(runs))
    del graphs, keep
    return quantile(us, 0.5), quantile(us, 0.25), quantile(us, 0.75), runs


def time_do_bench(calls, opts):
    call = calls[0]
    for _ in range(opts.warmup):
        call()
    torch.cuda.synchronize()
    rep = max(20.0, min(opts.budget_ms, 1000.0))
    median_ms = triton.testing.do_bench(call, warmup=10, rep=rep, return_mode="median")
    return median_ms * 1e3, float("nan"), float("nan"), 0


def time_calls(calls, opts):
    """Median timing of the calls, by graph replay where capture works, else do_bench."""
    if opts.graphs:
        try:
            return time_graphs(calls, opts) + ("graph",)
        except Exception as error:  # capture refused: say so and time without graphs
            print(f"    (graph capture failed, timing with do_bench: {str(error).splitlines()[0][:100]})")
            torch.cuda.synchronize()
    return time_do_bench(calls, opts) + ("do_bench",)


def copy_bandwidth(opts):
    """GB/s of a 1 GiB device-to-device clone, bytes read + written (outside any graph)."""
    x = torch.randn(1 << 28, device="cuda")
    median_us = time_do_bench([lambda: torch.clone(x)], opts)[0]
    del x
    return 2 * (1 << 30) / (median_us * 1e-6) / 1e9


# ---- one row -------------------------------------------------------------------------------

def make_bcl(B, C, L, dtype, channel_last):
    if channel_last:
        return torch.randn(B, L, C, device="cuda", dtype=dtype).transpose(1, 2)
    return torch.randn(B, C, L, device="cuda", dtype=dtype)


def sets_needed(x_bytes, l2_bytes):
    return max(2, min(16, 4 * l2_bytes // x_bytes + 1))


def make_sets(B, C, L, K, dtype, channel_last, l2_bytes):
    n_sets = sets_needed(B * C * L * torch.finfo(dtype).bits // 8, l2_bytes)
    w = (torch.randn(C, K, device="cuda", dtype=dtype) / math.sqrt(K)).requires_grad_()
    b = (0.5 * torch.randn(C, device="cuda", dtype=dtype)).requires_grad_()
    sets = []
    for _ in range(n_sets):
        x = make_bcl(B, C, L, dtype, channel_last).requires_grad_()
        dout = make_bcl(B, C, L, dtype, channel_last)
        sets.append((x, w, b, dout))
    return sets


def forward_calls(fn, sets):
    def call_for(x, w, b, _dout):
        def call():
            with torch.no_grad():
                return fn(x, w, b)
        return call
    return [call_for(*s) for s in sets]


def forward_backward_calls(fn, sets):
    def call_for(x, w, b, dout):
        return lambda: torch.autograd.grad(fn(x, w, b), (x, w, b), dout)
    return [call_for(*s) for s in sets]


def check_against_cudnn(sets, dtype):
    """The shift-and-add form and cuDNN agree (a check of this script, not a timing)."""
    x, w, b, _ = sets[0]
    with torch.no_grad():
        ours = compiled_shift_and_add(x, w, b).float()
        ref = cudnn_conv(x, w, b).float()
    error = ((ours - ref).norm() / ref.norm()).item()
    return error < (2e-2 if dtype == torch.bfloat16 else 1e-3), error


def percent(bytes_moved, us, copy_gbps):
    return 100.0 * bytes_moved / (us * 1e-6) / 1e9 / copy_gbps


def bench_peer(peer, B, C, L, K, dname, l2_bytes, copy_gbps, opts):
    dtype = DTYPES[dname]
    channel_last = peer in CHANNEL_LAST
    fn = {"cudnn": cudnn_conv, "dao": dao_causal_conv1d, "dao-cl": dao_causal_conv1d}.get(peer, compiled_shift_and_add)
    sets = make_sets(B, C, L, K, dtype, channel_last, l2_bytes)
    row = dict(peer=peer, B=B, C=C, L=L, dtype=dname, layout="cl" if channel_last else "cf", K=K)
    status = "ok"
    if peer == "compiled":
        ok, error = check_against_cudnn(sets, dtype)
        if not ok:
            status = f"differs from cudnn: rel error {error:.2e}"
    fwd = time_calls(forward_calls(fn, sets), opts)
    both = time_calls(forward_backward_calls(fn, sets), opts)
    nbytes = B * C * L * torch.finfo(dtype).bits // 8
    row.update(fwd_us=fwd[0], fwd_q1_us=fwd[1], fwd_q3_us=fwd[2], fwd_runs=fwd[3],
               fwd_pct_copy=percent(2 * nbytes, fwd[0], copy_gbps),
               fwdbwd_us=both[0], fwdbwd_q1_us=both[1], fwdbwd_q3_us=both[2], fwdbwd_runs=both[3],
               fwdbwd_pct_copy=percent(5 * nbytes, both[0], copy_gbps),
               method=fwd[4] if fwd[4] == both[4] else f"{fwd[4]}/{both[4]}", status=status)
    return row


def bench_clone(B, C, L, dname, channel_last, copy_gbps, opts):
    """torch.clone of x, timed outside any graph (see the top of this file); do_bench's L2
    clearing between runs stands in for the rotation."""
    dtype = DTYPES[dname]
    x = make_bcl(B, C, L, dtype, channel_last)
    fwd = time_do_bench([lambda: torch.clone(x)], opts) + ("do_bench",)
    nbytes = B * C * L * torch.finfo(dtype).bits // 8
    return dict(peer="clone", B=B, C=C, L=L, dtype=dname, layout="cl" if channel_last else "cf", K=0,
                fwd_us=fwd[0], fwd_q1_us=fwd[1], fwd_q3_us=fwd[2], fwd_runs=fwd[3],
                fwd_pct_copy=percent(2 * nbytes, fwd[0], copy_gbps), method=fwd[4], status="ok")


# ---- the plan and the table ----------------------------------------------------------------

def plan(args):
    """The rows to time, most wanted first (K = 4, then 8, channel-first before channel-last),
    so that a time limit drops the least wanted ones."""
    rows = []
    for peer in args.peers:
        for size in args.sizes:
            for dname in args.dtypes:
                for K in args.ks:
                    priority = (0 if K == 4 else 1 if K == 8 else 2, peer in CHANNEL_LAST)
                    rows.append((priority, peer, size, dname, K))
    rows.sort(key=lambda r: r[0])
    return [r[1:] for r in rows]


FIELDS = ["peer", "B", "C", "L", "dtype", "layout", "K", "fwd_us", "fwd_q1_us", "fwd_q3_us", "fwd_runs",
          "fwd_pct_copy", "fwdbwd_us", "fwdbwd_q1_us", "fwdbwd_q3_us", "fwdbwd_runs", "fwdbwd_pct_copy",
          "method", "copy_GBps", "seconds", "status"]


def fmt(value, digits=1):
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def print_table(rows):
    print(f"\n{'peer':<12} {'B x C x L':<15} {'dtype':<5} {'lay':<3} {'K':>2} {'fwd us':>10} {'% copy':>7} "
          f"{'fwd+bwd us':>11} {'% copy':>7}  status")
    order = {p: i for i, p in enumerate(["clone"] + PEERS)}
    for r in sorted(rows, key=lambda r: (SIZES.index((r["B"], r["C"], r["L"])) if (r["B"], r["C"], r["L"]) in SIZES
                                         else 9, r["dtype"], r["K"], order.get(r["peer"], 9))):
        shape = f"{r['B']}x{r['C']}x{r['L']}"
        print(f"{r['peer']:<12} {shape:<15} {r['dtype']:<5} {r['layout']:<3} {r['K']:>2} "
              f"{fmt(r.get('fwd_us')):>10} {fmt(r.get('fwd_pct_copy')):>7} {fmt(r.get('fwdbwd_us')):>11} "
              f"{fmt(r.get('fwdbwd_pct_copy')):>7}  {r['status']}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--quick", action="store_true", help="few runs: a smoke test, not a measurement")
    p.add_argument("--max-seconds", type=float, default=0,
                   help="start no new row after this many seconds (0: no limit); the rest are marked skipped")
    p.add_argument("--no-graph", action="store_true", help="time with triton's do_bench instead of CUDA graphs")
    p.add_argument("--sizes", default=",".join(f"{b}x{c}x{l}" for b, c, l in SIZES))
    p.add_argument("--ks", default=",".join(map(str, KS)))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--peers", default=None, help="default: all; the dao peers only with --peer-dir")
    p.add_argument("--peer-dir", default=None, help="bench/build_peers.py's --out (for the dao peers)")
    args = p.parse_args(argv)
    if args.peers is None:
        args.peers = ",".join(q for q in PEERS if args.peer_dir or not q.startswith("dao"))
    args.sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    args.ks = [int(k) for k in args.ks.split(",")]
    args.dtypes = args.dtypes.split(",")
    args.peers = args.peers.split(",")
    if any(len(s) != 3 for s in args.sizes) or any(d not in DTYPES for d in args.dtypes) or \
            any(p_ not in PEERS for p_ in args.peers) or any(k < 1 for k in args.ks):
        p.error("bad --sizes, --dtypes, --peers or --ks")
    if any(q.startswith("dao") for q in args.peers) and not args.peer_dir:
        p.error("the dao peers need --peer-dir")
    return args


def main(argv):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 2
    if args.peer_dir:
        global dao_conv
        import peer_import
        dao_conv = peer_import.causal_conv1d_fn(args.peer_dir)
    opts = Options()
    if args.quick:
        opts.max_runs, opts.min_runs, opts.warmup, opts.budget_ms = 5, 2, 1, 100.0
    opts.graphs = not args.no_graph
    for name in ("recompile_limit", "cache_size_limit"):  # one compile per row, never a silent fallback
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)
    if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
        torch._dynamo.config.accumulated_recompile_limit = 1 << 16

    seed = int.from_bytes(os.urandom(6), "little")
    torch.manual_seed(seed)
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 0) or L2_FALLBACK
    started = time.monotonic()
    copy_gbps = copy_bandwidth(opts)
    print(f"device: {props.name}, {l2_bytes / 2**20:.0f} MiB L2; torch {torch.__version__}; seed {seed}; "
          f"{'CUDA graphs' if opts.graphs else 'do_bench'}")
    print(f"copy bandwidth (1 GiB clone, read + write): {copy_gbps:.1f} GB/s", flush=True)

    writer, csv_file = None, None
    if args.csv:
        csv_file = open(args.csv, "w", newline="")
        writer = csv.DictWriter(csv_file, fieldnames=FIELDS, restval="")
        writer.writeheader()
    rows = []

    def emit(row, row_started):
        row["copy_GBps"] = copy_gbps
        row["seconds"] = time.monotonic() - row_started
        rows.append(row)
        if writer:
            writer.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in row.items()})
            csv_file.flush()
        print(f"  {row['peer']:<12} {row['B']}x{row['C']}x{row['L']} {row['dtype']:<4} {row['layout']} K={row['K']}: "
              f"fwd {fmt(row.get('fwd_us'))} us, fwd+bwd {fmt(row.get('fwdbwd_us'))} us "
              f"({row['seconds']:.1f} s) {row['status']}", flush=True)

    def out_of_time():
        return args.max_seconds > 0 and time.monotonic() - started > args.max_seconds

    clones = sorted({(s, d, cl) for s in args.sizes for d in args.dtypes
                     for cl in ([False, True] if CHANNEL_LAST & set(args.peers) else [False])})
    for (B, C, L), dname, cl in clones:
        t0 = time.monotonic()
        emit(bench_clone(B, C, L, dname, cl, copy_gbps, opts), t0)
    failures = 0
    for peer, (B, C, L), dname, K in plan(args):
        t0 = time.monotonic()
        base = dict(peer=peer, B=B, C=C, L=L, dtype=dname, layout="cl" if peer in CHANNEL_LAST else "cf", K=K)
        if out_of_time():
            emit(dict(base, status="skipped: --max-seconds reached"), t0)
            continue
        try:
            row = bench_peer(peer, B, C, L, K, dname, l2_bytes, copy_gbps, opts)
        except Exception as error:  # one failing peer must not hide the others
            failures += 1
            row = dict(base, status=f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
        if row["status"] != "ok" and not row["status"].startswith("failed"):
            failures += 1
        emit(row, t0)
        torch._dynamo.reset()  # keep each row's compile separate and the guard lists short
        torch.cuda.empty_cache()
    if csv_file:
        csv_file.close()
    print_table(rows)
    print(f"\nelapsed {time.monotonic() - started:.1f} s; {failures} rows failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
