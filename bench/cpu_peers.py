#!/usr/bin/env python3
"""CPU peer of bench/train_bench.c: the same Mamba language model and training step in PyTorch
on the CPU, timed in rounds that alternate with tapegrad's own benchmark on the same cores.

    python3 bench/cpu_peers.py [--sizes LIST] [--threads N] [--rounds R] [--steps K]
                               [--variants eager-seq,compile-seq]
                               [--train-bench PATH] [--csv PATH]

The model is the one the training programs build (tg_mamba): embedding tied to the head,
pre-norm residual blocks of RMSNorm and a Mamba mixer (expand 2, d_conv 4, dt_rank
ceil(d_model/16); in_proj, x_proj and out_proj without bias, dt_proj with its bias inside
the softplus), a final RMSNorm. One step, as train_bench times it: zero_grad, forward,
cross-entropy over every position, backward, clip_grad_norm_(1.0), AdamW (weight decay 0.1,
warm-up + cosine schedule), on one of four random host batches.

PyTorch has no CPU kernel for the selective scan; the variants write it in PyTorch:
  eager-seq        the recurrence one step at a time (h = exp(delta A) h + delta B u)
  eager-chunked    chunks of --chunk steps: inside a chunk the decays exp(S_t - S_s) as a
                   masked (chunk x chunk) matrix, between chunks the state carried over
  compile-chunked  the chunked model under torch.compile (inductor, C++ code for the CPU)
  compile-seq      the step-by-step model under torch.compile (the loop unrolled: slow to
                   compile at long sequences)
Before timing, each variant's first loss is checked against eager-seq's (same weights).
By default the two step-by-step variants run: they were the fastest eager and compiled
forms at every size measured on the 2-vCPU Xeon and EPYC machines (docs/benchmarks.md);
the chunked ones are slower there by 4-7x and take minutes at batch 32.

Each round runs tapegrad's step (train_bench --device cpu, one process per round, --steps
steps after --warmup) and then each variant for the same number of steps, so slow drifts
of the machine fall on every side alike. A side's figure is the median over rounds of its
round's median step time. Threads: PyTorch gets torch.set_num_threads(--threads);
tapegrad gets TG_NUM_THREADS=--threads and OPENBLAS_NUM_THREADS=1 (its scan and loops split
over the cores; OpenBLAS's own threads would busy-wait on them between small products).
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

SIZES = {  # layers, d_model, seq, batch, vocab, d_state (train_bench's names)
    "demo": (2, 32, 32, 32, 16, 8),
    "induction": (2, 64, 256, 8, 16, 16),
    "induction-b32": (2, 64, 256, 32, 16, 16),
}
BATCHES = 4


def build_model(torch, size, scan):
    nn = torch.nn
    F = torch.nn.functional
    layers, d_model, _, _, vocab, d_state = size
    d_inner, d_conv, dt_rank = 2 * d_model, 4, math.ceil(d_model / 16)

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
            self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
            self.x_proj = nn.Linear(d_inner, dt_rank + 2 * d_state, bias=False)
            self.dt_proj = nn.Linear(dt_rank, d_inner, bias=True)
            self.out_proj = nn.Linear(d_inner, d_model, bias=False)
            a = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
            self.A_log = nn.Parameter(torch.log(a))
            self.D = nn.Parameter(torch.ones(d_inner))
            dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
            with torch.no_grad():
                self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)

        def forward(self, h):
            length = h.shape[1]
            x, z = self.in_proj(h).chunk(2, dim=-1)  # (B, L, E) each
            x = F.silu(self.conv1d(x.transpose(1, 2))[..., :length]).transpose(1, 2)
            dt, B, C = self.x_proj(x).split([dt_rank, d_state, d_state], dim=-1)
            delta = F.softplus(self.dt_proj(dt))  # (B, L, E)
            y = scan(x, delta, -torch.exp(self.A_log), B, C)
            y = (y + x * self.D) * F.silu(z)
            return self.out_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.mixer = RMSNorm(d_model), Mixer()

        def forward(self, h):
            return h + self.mixer(self.norm(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, d_model)
            self.layers = nn.ModuleList(Block() for _ in range(layers))
            self.norm_f = RMSNorm(d_model)

        def forward(self, ids):
            h = self.embedding(ids)
            for layer in self.layers:
                h = layer(h)
            return self.norm_f(h) @ self.embedding.weight.t()

    torch.manual_seed(1)
    return Model()


def sequential_scan(torch):
    # The per-step slices come from unbind, whose backward stacks their gradients once;
    # indexing [:, t] instead would give every step's gradient as a zero-filled tensor of the
    # whole (B, L, E, N) size, and that, not the recurrence, would set the time.
    def scan(u, delta, A, B, C):  # u, delta (B, L, E); A (E, N); B, C (B, L, N)
        dA = torch.exp(delta.unsqueeze(-1) * A).unbind(1)  # L × (B, E, N)
        dBu = ((delta * u).unsqueeze(-1) * B.unsqueeze(2)).unbind(1)
        Cs = C.unsqueeze(2).unbind(1)  # L × (B, 1, N)
        h = torch.zeros_like(dA[0])
        ys = []
        for t in range(len(dA)):
            h = dA[t] * h + dBu[t]
            ys.append((h * Cs[t]).sum(-1))
        return torch.stack(ys, dim=1)

    return scan


def chunked_scan(torch, chunk):
    # Chunks from split (one backward for all), not slices (a zero-filled full-size gradient each).
    def scan(u, delta, A, B, C):
        batch, length, inner = u.shape
        log_decays = (delta.unsqueeze(-1) * A).split(chunk, dim=1)  # (B, T, E, N) each, ≤ 0
        dBus = ((delta * u).unsqueeze(-1) * B.unsqueeze(2)).split(chunk, dim=1)
        Cs = C.split(chunk, dim=1)
        h = u.new_zeros(batch, inner, A.shape[1])
        ys = []
        for log_decay, dBu, Ck in zip(log_decays, dBus, Cs):
            t = log_decay.shape[1]
            S = torch.cumsum(log_decay, dim=1)  # (B, T, E, N)
            # decay[b, t, s, e, n] = exp(S_t - S_s) for s ≤ t, else 0 (the exponent is ≤ 0 there)
            diff = S.unsqueeze(2) - S.unsqueeze(1)
            mask = torch.ones(t, t, dtype=torch.bool, device=u.device).tril().view(1, t, t, 1, 1)
            decay = torch.exp(diff.masked_fill(~mask, float("-inf")))
            states = (decay * dBu.unsqueeze(1)).sum(2) + torch.exp(S) * h.unsqueeze(1)
            ys.append((states * Ck.unsqueeze(2)).sum(-1))
            h = states[:, -1]
        return torch.cat(ys, dim=1)

    return scan


def make_step(torch, model, steps_total):
    params = list(model.parameters())
    try:
        optim = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, fused=True)
    except (RuntimeError, TypeError):
        optim = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, foreach=True)

    def factor(k):  # warm-up over 2 steps, then cosine to 0.1
        if k < 2:
            return (k + 1) / 2
        progress = min(1.0, (k - 2) / max(1, steps_total - 2))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optim, factor)

    def step(ids, targets):
        optim.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        schedule.step()
        return loss

    return step


def batches(torch, size):
    _, _, seq, batch, vocab, _ = size
    g = torch.Generator().manual_seed(2)
    return [(torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g))
            for _ in range(BATCHES)]


def time_steps(step, data, steps, warmup):
    for k in range(warmup):
        step(*data[k % BATCHES])
    times = []
    for k in range(steps):
        t0 = time.perf_counter()
        step(*data[k % BATCHES])
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def tapegrad_round(args, name, size):
    spec = name if name in SIZES else ",".join(map(str, size))
    env = dict(os.environ, TG_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([args.train_bench, "--device", "cpu", "--sizes", spec, "--precision", "f32", "--graph", "off",
                          "--steps", str(args.steps), "--warmup", str(args.warmup), "--max-seconds", "1000"],
                         env=env, capture_output=True, text=True, check=True).stdout
    row = [line.split() for line in out.splitlines() if line.startswith(spec + " ")]
    return float(row[0][3])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="demo;induction;induction-b32", help="names, separated by ';'")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10, help="timed steps per side and round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--chunk", type=int, default=16, help="steps per chunk of the chunked scan")
    p.add_argument("--variants", default="eager-seq,compile-seq")
    p.add_argument("--train-bench", default="build/bench/train_bench")
    p.add_argument("--csv")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"cpu_peers: {cpu}, {args.threads} threads, torch {torch.__version__}, {args.rounds} rounds of "
          f"{args.steps} steps per side", flush=True)
    rows = []
    for name in args.sizes.split(";"):
        size = SIZES[name]
        data = batches(torch, size)
        total = args.rounds * (args.steps + args.warmup) + 10
        steps, reference = {}, None
        for variant in ["eager-seq"] + [v for v in variants if v != "eager-seq"]:
            scan = sequential_scan(torch) if variant.endswith("-seq") else chunked_scan(torch, args.chunk)
            model = build_model(torch, size, scan)
            if variant.startswith("compile"):
                model = torch.compile(model)
            with torch.no_grad():
                logits = model(data[0][0])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                         data[0][1].reshape(-1)).item()
            reference = loss if reference is None else reference
            if abs(loss - reference) > 1e-4 * abs(reference):
                sys.exit(f"cpu_peers: {name} {variant}: first loss {loss} differs from eager-seq's {reference}")
            if variant in variants:
                steps[variant] = make_step(torch, model, total)
        medians = {side: [] for side in ["tapegrad"] + list(steps)}
        for _ in range(args.rounds):
            medians["tapegrad"].append(tapegrad_round(args, name, size))
            for variant, step in steps.items():
                medians[variant].append(time_steps(step, data, args.steps, args.warmup))
        result = {side: statistics.median(m) for side, m in medians.items()}
        best = min((v for v in result if v != "tapegrad"), key=result.get)
        rows.append((name, size, result, best))
        line = ", ".join(f"{side} {ms:.1f}" for side, ms in result.items())
        print(f"{name}: {line} ms; best PyTorch {best}: tapegrad is {result[best] / result['tapegrad']:.2f}x", flush=True)
    print(f"\n{'size':<14} {'tapegrad ms':>11} " + " ".join(f"{v:>15}" for v in variants) + f" {'x best':>7}")
    for name, _, result, best in rows:
        print(f"{name:<14} {result['tapegrad']:>11.1f} " + " ".join(f"{result.get(v, float('nan')):>15.1f}" for v in variants)
              + f" {result[best] / result['tapegrad']:>7.2f}")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("impl,size,layers,d_model,seq,batch,vocab,d_state,threads,median_ms\n")
            for name, size, result, _ in rows:
                for side, ms in result.items():
                    impl = "tapegrad" if side == "tapegrad" else "torch-" + side
                    f.write(f"{impl},{name}," + ",".join(map(str, size)) + f",{args.threads},{ms:.3f}\n")


if __name__ == "__main__":
    main()
