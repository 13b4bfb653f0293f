#!/usr/bin/env python3
"""Where a CPU training step's time goes, per op and phase, from perf's call stacks.

    python3 bench/cpu_profile.py [--sizes LIST] [--steps N] [--train-bench PATH]

Runs build/bench/train_bench --device cpu (f32, one size at a time) under
`perf record --call-graph dwarf`, then sorts every sample by op (the kernel it lands in)
and phase: the optimizer when tg_optim_step is on its stack, the backward when
tg_backward is, else the forward; samples in the library's worker threads take the phase
of the kernel they run for. The table gives each (op, phase) its share of the CPU time
and its milliseconds per step (the share of the measured step time; CPU time on all
threads is counted, so on several threads a row can exceed what it costs in wall time).
Needs perf (Debian: linux-perf) and permission to profile (perf_event_paranoid <= 1, or
root). OPENBLAS_NUM_THREADS=1 and the library's threads are used, as the demo runs.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

# (frame-name pattern, op, phase or None for "from the stack"); the first pattern found
# walking from the leaf up names the sample's op.
KERNELS = [
    (r"^tg_cpu_selective_scan_fwd|^forward_rows$", "selective scan", "forward"),
    (r"^tg_cpu_selective_scan_bwd|^backward_rows$|^scan_backward_run", "selective scan", "backward"),
    (r"^tg_cpu_causal_conv1d_fwd|^conv_(float_)?forward_channels$", "causal conv1d", "forward"),
    (r"^tg_cpu_causal_conv1d_bwd|^conv_(float_)?backward_channels$", "causal conv1d", "backward"),
    (r"^tg_cpu_rmsnorm_fwd|^norm_forward_rows$", "rmsnorm", "forward"),
    (r"^tg_cpu_rmsnorm_bwd|^norm_backward_blocks$", "rmsnorm", "backward"),
    (r"^tg_cpu_adamw|^tg_cpu_sum_squares|^tg_cpu_scale", "optimizer kernels", None),
    (r"^tg_cpu_sum_axis", "sum over an axis", None),
    (r"^tg_accumulate_grad|^tg_reduce_to_shape", "gradient sums", None),
    (r"^tg_cpu_embedding", "embedding", None),
    (r"^tg_cpu_cross_entropy|^ce_(forward|backward)_rows$|^tg_cpu_row_logsumexp|^tg_cpu_count_correct", "cross-entropy",
     None),
    (r"^tg_cpu_softmax", "softmax", None),
    (r"^tg_cpu_unary|^tg_cpu_binary", "elementwise", None),
    (r"sgemm|dgemm|^cblas_|^tg_cpu_matmul|^matmul_batches$", "matmul (BLAS)", None),
    (r"^tg_copy|^copy_strided|^tg_cpu_convert|^tg_cpu_concat|^tg_cpu_slice|^tg_fill|^tg_zeros", "copies and fills", None),
    (r"^malloc|^free|^_int_|^calloc|^tg_tape|^tg_record|^tg_empty|^tg_tensor_new|^tg_view", "tape and memory", None),
]
PHASES = [("tg_optim_step", "optimizer"), ("tg_backward", "backward"), ("tg_mamba_loss", "forward")]


def classify(frames):
    """(op, phase) of one sample; frames run from the leaf to the root."""
    phase = next((name for marker, name in PHASES if any(f.startswith(marker) for f in frames)), None)
    for pattern, op, kernel_phase in KERNELS:
        if any(re.search(pattern, f) for f in frames):
            return op, phase or kernel_phase or "other"
    return "other", phase or "other"


def samples(perf_data):
    """Each sample's stack (function names, leaf first) from perf script."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "ip,sym"], capture_output=True, text=True,
                         check=True).stdout
    stack = []
    for line in out.splitlines():
        if not line.strip():
            if stack:
                yield stack
            stack = []
            continue
        parts = line.split(None, 1)
        stack.append(parts[1].split("+")[0].strip() if len(parts) > 1 else "?")
    if stack:
        yield stack


def profile(args, size):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        run = subprocess.run(["perf", "record", "-q", "-F", "2000", "--call-graph", "dwarf,32768", "-o", data,
                              args.train_bench, "--device", "cpu", "--sizes", size, "--precision", "f32", "--graph",
                              "off", "--steps", str(args.steps), "--max-seconds", "600"],
                             env=env, capture_output=True, text=True, check=True)
        row = [line.split() for line in run.stdout.splitlines() if line.startswith(size + " ")]
        step_ms = float(row[0][3])
        counts = collections.Counter(classify(stack) for stack in samples(data))
    total = sum(counts.values())
    print(f"\n{size}: median step {step_ms:.1f} ms (train_bench under perf), {total} samples")
    print(f"{'op':<20} {'phase':<10} {'share':>6} {'ms/step':>8}")
    for (op, phase), n in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{op:<20} {phase:<10} {100 * n / total:>5.1f}% {step_ms * n / total:>8.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="demo;induction;induction-b32", help="train_bench size names, ';' between")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--train-bench", default="build/bench/train_bench")
    args = p.parse_args()
    if not os.path.exists(args.train_bench):
        sys.exit(f"cpu_profile: {args.train_bench} not found (build the train_bench target first)")
    for size in args.sizes.split(";"):
        profile(args, size)


if __name__ == "__main__":
    main()
