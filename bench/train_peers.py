#!/usr/bin/env python3
"""PyTorch peer of bench/train_bench.c: the same Mamba language model and training step in
PyTorch with the reference CUDA kernels (mamba-ssm's selective scan and fused Mamba block,
causal-conv1d), built from their published sources by bench/build_peers.py.

    python3 bench/train_peers.py --peers DIR [--sizes LIST] [--precision f32,bf16]
                                 [--variants fast,slow,compile] [--steps N] [--warmup N]
                                 [--max-seconds S] [--csv PATH]

The model is mamba-ssm's MambaLMHeadModel as its Mamba-1 configs build it (RMSNorm, the
residual added inside the fused Triton norm and kept in float32, embedding tied to the
head; vocabulary not padded), with the sizes of train_bench (expand 2, d_conv 4, d_state
16, dt_rank ceil(d_model/16)). One step, as train_bench times it:

    batch copied to the GPU; zero_grad; forward (bf16: under autocast); cross-entropy in
    float32 over every position; backward; clip_grad_norm_(1.0); fused AdamW (weight decay
    0.1, warm-up + cosine schedule)

Variants: "fast" is the block's fused path (mamba_inner_fn: conv, projections and scan in one
autograd function), "slow" the module's unfused path (causal_conv1d_fn and selective_scan_fn
called separately), "compile" the fast model under torch.compile (the extension calls stay
outside the compiled graphs). TF32 is off. Each step is timed on its own (host clock,
torch.cuda.synchronize after the step) after --warmup untimed steps; the peak is
torch.cuda.max_memory_allocated over the timed steps. Output: a table, and CSV lines in
train_bench's format with impl = "torch-<variant>".
"""
import argparse
import math
import statistics
import sys
import time

import peer_import

SIZES = {  # layers, d_model, seq, batch, vocab (as bench/train_bench.c names them)
    "induction": (2, 64, 256, 8, 16),
    "induction-b32": (2, 64, 256, 32, 16),
    "char-small": (4, 256, 256, 32, 64),
    "selective-copy": (2, 64, 4096, 64, 16),
    "130m": (24, 768, 2048, 8, 256),
}


def import_peers(peer_dir):
    """MambaLMHeadModel and MambaConfig from the built peers."""
    models = peer_import.mamba_module(peer_dir, "models.mixer_seq_simple")
    config = peer_import.mamba_module(peer_dir, "models.config_mamba")
    return models.MambaLMHeadModel, config.MambaConfig


def build_model(Model, Config, size, fast):
    import torch

    layers, d_model, _, _, vocab = size
    config = Config(d_model=d_model, n_layer=layers, vocab_size=vocab, pad_vocab_size_multiple=1,
                    ssm_cfg={"layer": "Mamba1", "d_state": 16, "d_conv": 4, "expand": 2,
                             "use_fast_path": fast},
                    rms_norm=True, residual_in_fp32=True, fused_add_norm=True, tie_embeddings=True)
    torch.manual_seed(1)
    return Model(config, device="cuda", dtype=torch.float32)


def schedule(warmup, total, floor=0.1):
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        t = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))
    return factor


def make_step(model, precision, vocab, total_steps):
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(2, total_steps))
    bf16 = precision == "bf16"

    def step(ids_host, targets_host):
        ids = ids_host.to("cuda")
        targets = targets_host.to("cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = model(ids).logits
        loss = F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss

    return step


def time_case(Model, Config, name, size, precision, variant, args):
    import torch

    layers, d_model, seq, batch, vocab = size
    model = build_model(Model, Config, size, fast=variant != "slow")
    if variant == "compile":
        # A fresh compiler state per case: after a first model, re-tracing mamba-ssm's Triton
        # layer norm in the same process failed an internal assertion in PyTorch 2.11.
        torch._dynamo.reset()
        model = torch.compile(model)
    total = args.warmup + args.steps + 10
    step = make_step(model, precision, vocab, total)
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(4):
        ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen, dtype=torch.int64)
        batches.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    k = 0
    for _ in range(args.warmup):
        step(*batches[k % 4])
        k += 1
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, start = [], time.perf_counter()
    while len(times) < args.steps and (len(times) < 3 or time.perf_counter() - start < args.max_seconds):
        t0 = time.perf_counter()
        step(*batches[k % 4])
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
        k += 1
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    peak = torch.cuda.max_memory_allocated() / 2**20
    del model, step
    torch.cuda.empty_cache()
    return statistics.median(times), q[0], q[2], batch * seq / (statistics.median(times) / 1e3), peak, len(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", required=True, help="the folder bench/build_peers.py filled")
    parser.add_argument("--sizes", default=";".join(SIZES), help="names, separated by ';'")
    parser.add_argument("--precision", default="f32,bf16")
    parser.add_argument("--variants", default="fast,slow,compile")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=20)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    Model, Config = import_peers(args.peers)
    print(f"train_peers: torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    csv = open(args.csv, "w") if args.csv else None
    if csv:
        csv.write("impl,size,layers,d_model,seq,batch,vocab,precision,graph,median_ms,q1_ms,q3_ms,tokens_per_s,"
                  "peak_mib,steps\n")
    print(f"{'size':16} {'dtype':5} {'variant':8} {'median':>10} {'q1':>10} {'q3':>10} {'tokens/s':>12} {'peak MiB':>10}")
    failures = 0
    for name in args.sizes.split(";"):
        size = SIZES[name]
        for precision in args.precision.split(","):
            for variant in args.variants.split(","):
                try:
                    med, q1, q3, rate, peak, n = time_case(Model, Config, name, size, precision, variant, args)
                except Exception as error:  # one failed variant must not cost the others
                    print(f"train_peers: {name} {precision} {variant}: {type(error).__name__}: {error}", flush=True)
                    failures += 1
                    torch.cuda.empty_cache()
                    continue
                print(f"{name:16} {precision:5} {variant:8} {med:10.3f} {q1:10.3f} {q3:10.3f} {rate:12.0f} {peak:10.1f}",
                      flush=True)
                if csv:
                    csv.write(f"torch-{variant},{name},{','.join(map(str, size))},{precision},off,{med:.4f},{q1:.4f},"
                              f"{q3:.4f},{rate:.0f},{peak:.1f},{n}\n")
                    csv.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
