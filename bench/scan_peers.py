#!/usr/bin/env python3
"""PyTorch peers of bench/scan_bench.c: the same selective scan (gate z, skip Dv, delta_bias +
softplus, no initial or final state) on the same sizes and dtypes, timed on the GPU.

    python3 bench/scan_peers.py [--quick] [--max-seconds S] [--peers mamba,chunked,sequential]
                                [--peer-dir DIR]

Peers (the maths in float32 whatever the storage dtype, as the CUDA kernels do):
  mamba-ssm              mamba-ssm's CUDA selective scan (selective_scan_fn), built from its
                         source distribution into --peer-dir by bench/build_peers.py; A, Dv
                         and the bias stay float32, as its interface requires
  torch-sequential       eager PyTorch, one step of the recurrence per Python iteration
  torch-compile-chunked  torch.compile of a chunked scan: a log-step (Hillis-Steele) scan of
                         the pairs (decay, input) inside chunks of 64 steps, the same scan over
                         the chunks' end states, then one pass adding each chunk's incoming
                         state; every op has a static shape
"fwd" runs under no_grad; "fwd+bwd" is torch.autograd.grad of the output with a random dout
for every input (u, delta, A, Bm, Cm, Dv, z, delta_bias). Each time is the median of CUDA-event
intervals after a warm-up (which also compiles). Output: '#' lines, then CSV lines in the
format of scan_bench:
    impl,B,D,N,L,dtype,fwd_us,fwdbwd_us,status
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

# B, D, N, L: the scans of bench/train_bench.c's models (D = d_inner = 2 d_model), and one more
SIZES = [(8, 128, 16, 256), (32, 512, 16, 256), (64, 128, 16, 4096), (8, 1536, 16, 2048), (16, 768, 16, 1024)]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
CHUNK = 64


def prepare(u, delta, A, Bm, Cm, bias):
    """Per-step decay a = exp(dt*A) and input x = dt*u*Bm, both (B, D, L, N) in float32."""
    dt = F.softplus(delta.float() + bias.float()[:, None])
    a = torch.exp(dt[..., None] * A.float()[None, :, None, :])
    x = (dt * u.float())[..., None] * Bm.float().transpose(1, 2)[:, None]
    return a, x


def finish(h, u, Cm, Dv, z):
    """out = (Cm.h + Dv*u) * silu(z), in u's dtype; h is (B, D, L, N)."""
    y = (h * Cm.float().transpose(1, 2)[:, None]).sum(-1) + Dv.float()[:, None] * u.float()
    return (y * F.silu(z.float())).to(u.dtype)


def sequential_scan(u, delta, A, Bm, Cm, Dv, z, bias):
    a, x = prepare(u, delta, A, Bm, Cm, bias)
    C = Cm.float()
    h = torch.zeros_like(x[:, :, 0])
    ys = []
    for t in range(u.shape[-1]):
        h = a[:, :, t] * h + x[:, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1) + Dv.float()[:, None] * u.float()
    return (y * F.silu(z.float())).to(u.dtype)


def scan_pairs(a, x, dim):
    """Inclusive scan of h = a*h_prev + x along dim (log2 steps). Returns (prod of a, h)."""
    n, k = a.shape[dim], 1
    while k < n:
        head_a, tail_a = a.narrow(dim, 0, k), a.narrow(dim, k, n - k)
        head_x, tail_x = x.narrow(dim, 0, k), x.narrow(dim, k, n - k)
        prev_a, prev_x = a.narrow(dim, 0, n - k), x.narrow(dim, 0, n - k)
        x = torch.cat([head_x, tail_a * prev_x + tail_x], dim=dim)
        a = torch.cat([head_a, tail_a * prev_a], dim=dim)
        k *= 2
    return a, x


def chunked_scan(u, delta, A, Bm, Cm, Dv, z, bias):
    a, x = prepare(u, delta, A, Bm, Cm, bias)
    B, D, L, N = a.shape
    nc = L // CHUNK
    a = a.reshape(B, D, nc, CHUNK, N)
    x = x.reshape(B, D, nc, CHUNK, N)
    a, x = scan_pairs(a, x, 3)  # x: the state from a zero start of the chunk; a: decay since it
    _, ends = scan_pairs(a[:, :, :, -1], x[:, :, :, -1], 2)  # the true state at each chunk's end
    incoming = torch.cat([torch.zeros_like(ends[:, :, :1]), ends[:, :, :-1]], dim=2)
    h = (x + a * incoming[:, :, :, None]).reshape(B, D, L, N)
    return finish(h, u, Cm, Dv, z)


compiled_chunked_scan = torch.compile(chunked_scan, dynamic=False)

def mamba_peer(peer_dir):
    """mamba-ssm's selective_scan_fn with this script's argument order."""
    import peer_import

    scan = peer_import.mamba_module(peer_dir, "ops.selective_scan_interface").selective_scan_fn

    def run(u, delta, A, Bm, Cm, Dv, z, bias):
        return scan(u, delta, A, Bm, Cm, Dv, z, bias, delta_softplus=True)

    return run


PEERS = {"mamba": ("mamba-ssm", None), "chunked": ("torch-compile-chunked", compiled_chunked_scan),
         "sequential": ("torch-sequential", sequential_scan)}
FLOAT32_PARAMETERS = {"mamba"}  # peers whose A, Dv and bias are float32 whatever u's dtype


def make_inputs(B, D, N, L, dtype, grad, float32_parameters=False):
    """The ranges of bench/scan_bench.c: dt = softplus(N(-4, 1) + N(0, 0.5)), A in [-16, -0.5]."""
    dev = "cuda"
    t = {
        "u": torch.randn(B, D, L, device=dev),
        "delta": torch.randn(B, D, L, device=dev) - 4.0,
        "A": -torch.empty(D, N, device=dev).uniform_(0.5, 16.0),
        "Bm": torch.randn(B, N, L, device=dev),
        "Cm": torch.randn(B, N, L, device=dev),
        "Dv": 1.0 + 0.1 * torch.randn(D, device=dev),
        "z": torch.randn(B, D, L, device=dev),
        "bias": 0.5 * torch.randn(D, device=dev),
    }
    order = ["u", "delta", "A", "Bm", "Cm", "Dv", "z", "bias"]
    kept = {"A", "Dv", "bias"} if float32_parameters else set()
    return [t[k].to(torch.float32 if k in kept else dtype).requires_grad_(grad) for k in order]


def median_us(call, runs, warmup):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def time_peer(fn, B, D, N, L, dtype, runs, warmup, float32_parameters=False):
    inputs = make_inputs(B, D, N, L, dtype, True, float32_parameters)
    dout = torch.randn(B, D, L, device="cuda").to(dtype)

    def forward():
        with torch.no_grad():
            return fn(*inputs)

    def forward_backward():
        return torch.autograd.grad(fn(*inputs), inputs, dout)

    fwd = median_us(forward, runs, warmup)
    both = median_us(forward_backward, runs, warmup)
    return fwd, both


def check_chunked():
    """The chunked form against the sequential one on a small case (a check of this script)."""
    inputs = make_inputs(2, 8, 16, 4 * CHUNK, torch.float32, False)
    with torch.no_grad():
        ref = sequential_scan(*inputs)
        got = compiled_chunked_scan(*inputs)
    return ((got - ref).norm() / ref.norm()).item()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few runs: a smoke test, not a measurement")
    p.add_argument("--max-seconds", type=float, default=0, help="start no new case after this many seconds")
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--peer-dir", default=None, help="bench/build_peers.py's --out (for the mamba peer)")
    args = p.parse_args(argv)
    peers = args.peers.split(",")
    if any(name not in PEERS for name in peers):
        p.error("peers are: " + ",".join(PEERS))
    if "mamba" in peers and not args.peer_dir:
        p.error("the mamba peer needs --peer-dir")
    if not torch.cuda.is_available():
        print("scan_peers.py: no CUDA device", file=sys.stderr)
        return 2
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    seed = int.from_bytes(os.urandom(6), "little")
    torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    print(f"# device: {props.name}; torch {torch.__version__}; seed {seed}")
    started = time.monotonic()
    try:
        print(f"# check: compiled chunked scan vs sequential, rel error {check_chunked():.2e}")
    except Exception as error:  # the timings below will say more
        print(f"# check failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    print("impl,B,D,N,L,dtype,fwd_us,fwdbwd_us,status", flush=True)
    failures = 0
    for name in peers:
        label, fn = PEERS[name]
        if name == "mamba":
            fn = mamba_peer(args.peer_dir)
        # The sequential peer launches thousands of kernels per call: fewer runs.
        runs, warmup = (3, 1) if args.quick else ((5, 1) if name == "sequential" else (20, 3))
        for (B, D, N, L) in SIZES:
            for dname, dtype in DTYPES.items():
                fwd = both = math.nan
                if args.max_seconds > 0 and time.monotonic() - started > args.max_seconds:
                    status = "skipped: --max-seconds reached"
                else:
                    try:
                        fwd, both = time_peer(fn, B, D, N, L, dtype, runs, warmup, name in FLOAT32_PARAMETERS)
                        status = "ok"
                    except Exception as error:  # one failing peer must not hide the others
                        failures += 1
                        status = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:100]}"
                        status = status.replace(",", ";")
                    torch.cuda.empty_cache()
                print(f"{label},{B},{D},{N},{L},{dname},{fwd:.1f},{both:.1f},{status}", flush=True)
    print(f"# elapsed {time.monotonic() - started:.1f} s; {failures} cases failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
