#!/usr/bin/env python3
"""An independent PyTorch implementation of the Mamba language model, for checking tapegrad's.

It builds the model from plain tensor operations (a sequential loop for the selective
scan, F.conv1d with left padding for the causal convolution, an explicit RMSNorm), runs
forward and backward in float64 on token ids, and writes the inputs, the parameters and
the results (logits, loss, the gradient of every parameter) to a test-vector file that
tests/test_mamba_reference.c reads.

Regenerate the committed vectors (from the repository root):

    python3 tests/python/mamba_reference.py --out tests/data/mamba_reference.bin
    python3 tests/python/mamba_reference.py --shape odd --out tests/data/mamba_reference_odd.bin

("default": 2 layers, d_model 16, the reference's defaults otherwise, vocab 11, B 2, L 12;
"odd": 3 layers, d_model 8, d_state 5, expand 3, d_conv 3, dt_rank 3, vocab 7, B 3, L 9.)

Check a vector file against this implementation (parameters and ids are read from the
file; the stored expectations must be reproduced), on the CPU or a GPU:

    python3 tests/python/mamba_reference.py --check tests/data/mamba_reference.bin [--device cuda]

Needs PyTorch (any 2.x; the CPU build is enough).

File format (little-endian), self-describing:
    8 bytes   magic b"TGVEC001"
    u32       number of entries
    per entry:
      u32     length of the name, then the name (UTF-8, no terminator)
      u32     dtype: 0 = float64, 1 = int32
      u32     ndim, then ndim × i64 shape
      data    prod(shape) values, row-major
Entries written here:
    config.sizes     i32 [vocab_size, d_model, n_layer, d_state, expand, d_conv, dt_rank]
    config.eps       f64 [eps]
    config.ignore_index  i32 [ignore_index]
    ids, targets     i32 (B, L); targets equal to ignore_index do not count
    param.<name>     every parameter, under the reference checkpoint's name
    expected.logits  f64 (B, L, vocab_size)
    expected.loss    f64 [loss]
    grad.<name>      d loss / d parameter, for every parameter
"""

import argparse
import math
import struct
import sys

import torch
import torch.nn.functional as F

MAGIC = b"TGVEC001"
F64, I32 = 0, 1
IGNORE_INDEX = -100


# ---- the model ----------------------------------------------------------------------------


def param_names(n_layer):
    """Names in the reference checkpoint's order (a module's own parameters before its submodules')."""
    names = ["backbone.embedding.weight"]
    for i in range(n_layer):
        p = f"backbone.layers.{i}."
        names += [p + "mixer." + s for s in ("A_log", "D", "in_proj.weight", "conv1d.weight", "conv1d.bias",
                                              "x_proj.weight", "dt_proj.weight", "dt_proj.bias", "out_proj.weight")]
        names.append(p + "norm.weight")
    names.append("backbone.norm_f.weight")
    return names


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def selective_scan(u, dt, A, Bm, Cm):
    """u, dt (B, L, E); A (E, N); Bm, Cm (B, L, N). One step at a time, from a zero state."""
    batch, length, inner = u.shape
    h = torch.zeros(batch, inner, A.shape[1], dtype=u.dtype, device=u.device)
    ys = []
    for t in range(length):
        decay = torch.exp(dt[:, t, :, None] * A)                          # (B, E, N)
        h = decay * h + (dt[:, t, :, None] * u[:, t, :, None]) * Bm[:, t, None, :]
        ys.append((h * Cm[:, t, None, :]).sum(dim=-1))                     # (B, E)
    return torch.stack(ys, dim=1)                                          # (B, L, E)


def mixer(p, prefix, x, cfg):
    """x (B, L, d_model) → (B, L, d_model)."""
    length = x.shape[1]
    inner, state, rank, width = cfg["expand"] * cfg["d_model"], cfg["d_state"], cfg["dt_rank"], cfg["d_conv"]
    xz = x @ p[prefix + "in_proj.weight"].t()                              # (B, L, 2E)
    xi, z = xz[..., :inner], xz[..., inner:]
    conv = F.conv1d(xi.transpose(1, 2), p[prefix + "conv1d.weight"], p[prefix + "conv1d.bias"],
                    padding=width - 1, groups=inner)[..., :length]        # causal: keep the first L outputs
    u = F.silu(conv).transpose(1, 2)                                       # (B, L, E)
    x_dbl = u @ p[prefix + "x_proj.weight"].t()
    dt_low, Bm, Cm = torch.split(x_dbl, [rank, state, state], dim=-1)
    dt = F.softplus(dt_low @ p[prefix + "dt_proj.weight"].t() + p[prefix + "dt_proj.bias"])
    A = -torch.exp(p[prefix + "A_log"])
    y = selective_scan(u, dt, A, Bm, Cm) + u * p[prefix + "D"]
    y = y * F.silu(z)
    return y @ p[prefix + "out_proj.weight"].t()


def forward(p, ids, cfg):
    h = p["backbone.embedding.weight"][ids]
    for i in range(cfg["n_layer"]):
        prefix = f"backbone.layers.{i}."
        h = h + mixer(p, prefix + "mixer.", rms_norm(h, p[prefix + "norm.weight"], cfg["eps"]), cfg)
    h = rms_norm(h, p["backbone.norm_f.weight"], cfg["eps"])
    return h @ p["backbone.embedding.weight"].t()                          # the head is tied to the embedding


def run(params, ids, targets, cfg, device):
    p = {k: v.detach().to(device).clone().requires_grad_(True) for k, v in params.items()}
    logits = forward(p, ids.to(device).long(), cfg)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).long().reshape(-1),
                           ignore_index=IGNORE_INDEX)
    loss.backward()
    grads = {k: v.grad.detach().cpu() for k, v in p.items()}
    return logits.detach().cpu(), loss.detach().cpu().reshape(1), grads


# ---- parameters ------------------------------------------------------------------------------


def make_params(cfg, gen):
    """The reference initialisation, then perturbed so that no parameter sits at a special
    value (ones, exact logs, tiny embeddings) that could hide a wrong gradient."""
    d, n_layer = cfg["d_model"], cfg["n_layer"]
    inner, state, rank, width = cfg["expand"] * d, cfg["d_state"], cfg["dt_rank"], cfg["d_conv"]

    def uniform(shape, bound):
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    p = {"backbone.embedding.weight": normal((cfg["vocab_size"], d), 0.3)}
    for i in range(n_layer):
        m = f"backbone.layers.{i}.mixer."
        dt = torch.exp(torch.rand(inner, generator=gen, dtype=torch.float64) * (math.log(0.1) - math.log(1e-3))
                       + math.log(1e-3)).clamp(min=1e-4)
        p[m + "A_log"] = torch.log(torch.arange(1, state + 1, dtype=torch.float64)).repeat(inner, 1) \
            + normal((inner, state), 0.1)
        p[m + "D"] = 1 + normal((inner,), 0.3)
        p[m + "in_proj.weight"] = uniform((2 * inner, d), d ** -0.5)
        p[m + "conv1d.weight"] = uniform((inner, 1, width), width ** -0.5)
        p[m + "conv1d.bias"] = uniform((inner,), width ** -0.5)
        p[m + "x_proj.weight"] = uniform((rank + 2 * state, inner), inner ** -0.5)
        p[m + "dt_proj.weight"] = uniform((inner, rank), rank ** -0.5)
        p[m + "dt_proj.bias"] = dt + torch.log(-torch.expm1(-dt))
        p[m + "out_proj.weight"] = uniform((d, inner), inner ** -0.5) * 4 / math.sqrt(n_layer)
        p[f"backbone.layers.{i}.norm.weight"] = 1 + normal((d,), 0.2)
    p["backbone.norm_f.weight"] = 1 + normal((d,), 0.2)
    assert list(p) == param_names(n_layer)
    return p


# ---- the file format -----------------------------------------------------------------------------


def write_vectors(path, entries):
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", len(entries)))
        for name, tensor in entries:
            code = I32 if tensor.dtype == torch.int32 else F64
            data = tensor.to(torch.int32 if code == I32 else torch.float64).contiguous()
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)) + raw)
            f.write(struct.pack("<II", code, data.dim()))
            f.write(struct.pack(f"<{data.dim()}q", *data.shape))
            fmt = "i" if code == I32 else "d"
            f.write(struct.pack(f"<{data.numel()}{fmt}", *data.reshape(-1).tolist()))


def read_vectors(path):
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != MAGIC:
        sys.exit(f"{path}: not a test-vector file (bad magic)")
    pos = 8
    (count,) = struct.unpack_from("<I", blob, pos)
    pos += 4
    entries = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<I", blob, pos)
        name = blob[pos + 4:pos + 4 + length].decode()
        pos += 4 + length
        code, ndim = struct.unpack_from("<II", blob, pos)
        pos += 8
        shape = struct.unpack_from(f"<{ndim}q", blob, pos)
        pos += 8 * ndim
        numel = math.prod(shape)
        fmt = "i" if code == I32 else "d"
        values = struct.unpack_from(f"<{numel}{fmt}", blob, pos)
        pos += 4 * numel if code == I32 else 8 * numel
        dtype = torch.int32 if code == I32 else torch.float64
        entries[name] = torch.tensor(values, dtype=dtype).reshape(shape)
    return entries


def config_from(entries):
    vocab, d, n_layer, state, expand, width, rank = entries["config.sizes"].tolist()
    return dict(vocab_size=vocab, d_model=d, n_layer=n_layer, d_state=state, expand=expand, d_conv=width,
                dt_rank=rank, eps=entries["config.eps"].item())


# ---- commands ---------------------------------------------------------------------------------------


SHAPES = {
    "default": (dict(vocab_size=11, d_model=16, n_layer=2, d_state=16, expand=2, d_conv=4, dt_rank=1, eps=1e-5), 2, 12),
    "odd": (dict(vocab_size=7, d_model=8, n_layer=3, d_state=5, expand=3, d_conv=3, dt_rank=3, eps=1e-3), 3, 9),
}


def generate(args):
    cfg, batch, length = SHAPES[args.shape]
    gen = torch.Generator().manual_seed(args.seed)
    params = make_params(cfg, gen)
    ids = torch.randint(0, cfg["vocab_size"], (batch, length), generator=gen, dtype=torch.int32)
    targets = torch.randint(0, cfg["vocab_size"], (batch, length), generator=gen, dtype=torch.int32)
    targets[0, 3] = targets[1, 7] = IGNORE_INDEX                          # two positions that must not count
    logits, loss, grads = run(params, ids, targets, cfg, args.device)
    sizes = [cfg[k] for k in ("vocab_size", "d_model", "n_layer", "d_state", "expand", "d_conv", "dt_rank")]
    entries = [("config.sizes", torch.tensor(sizes, dtype=torch.int32)),
               ("config.eps", torch.tensor([cfg["eps"]], dtype=torch.float64)),
               ("config.ignore_index", torch.tensor([IGNORE_INDEX], dtype=torch.int32)),
               ("ids", ids), ("targets", targets)]
    entries += [("param." + k, v) for k, v in params.items()]
    entries += [("expected.logits", logits), ("expected.loss", loss)]
    entries += [("grad." + k, v) for k, v in grads.items()]
    write_vectors(args.out, entries)
    print(f"wrote {args.out}: {len(entries)} entries, loss {loss.item():.12f}")


def check(args):
    entries = read_vectors(args.check)
    cfg = config_from(entries)
    params = {k[len("param."):]: v for k, v in entries.items() if k.startswith("param.")}
    if list(params) != param_names(cfg["n_layer"]):
        sys.exit(f"{args.check}: the parameters are not those of a {cfg['n_layer']}-layer model")
    logits, loss, grads = run(params, entries["ids"], entries["targets"], cfg, args.device)
    worst = 0.0
    for name, got in [("expected.logits", logits), ("expected.loss", loss)] + \
                     [("grad." + k, v) for k, v in grads.items()]:
        want = entries[name]
        error = ((got - want).norm() / want.norm().clamp(min=1e-300)).item()
        worst = max(worst, error)
        if error > 1e-10:
            print(f"{name}: relative error {error:.3g}")
    print(f"{args.check}: worst relative error {worst:.3g} ({'ok' if worst <= 1e-10 else 'MISMATCH'})")
    return 0 if worst <= 1e-10 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/data/mamba_reference.bin", help="where to write the vectors")
    parser.add_argument("--seed", type=int, default=20240613, help="seed of the parameters, ids and targets")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="default", help="the model and batch sizes")
    parser.add_argument("--check", metavar="FILE", help="recompute FILE's expectations and compare instead")
    parser.add_argument("--device", default="cpu", help="torch device to compute on (cpu, cuda)")
    args = parser.parse_args()
    sys.exit(check(args) if args.check else generate(args))


if __name__ == "__main__":
    main()
