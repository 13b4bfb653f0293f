#!/usr/bin/env python3
"""Builds the CUDA extensions of the reference Mamba kernels from their published source
distributions, for the peer benchmarks (bench/train_peers.py, bench/peers.py). Nothing of
theirs is kept in this repository: the sources come from PyPI, the build goes to --out.

    pip download --no-deps --no-binary :all: mamba-ssm causal-conv1d   # or fetch the .tar.gz
    python3 bench/build_peers.py --sdist DIR --out DIR [--jobs N] [--arch 90]

DIR holds mamba_ssm-*.tar.gz and causal_conv1d-*.tar.gz (or their unpacked folders). The
script unpacks them into --out, compiles selective_scan_cuda (mamba-ssm's selective scan)
and causal_conv1d_cuda with torch's extension builder (ninja), for one architecture, with
the flags of the packages' own setup.py, and leaves in --out:

    selective_scan_cuda*.so, causal_conv1d_cuda*.so   the compiled extensions
    mamba_ssm/, causal_conv1d/                        the packages' Python code
    peers.json                                        versions, torch, CUDA, arch

Put --out on sys.path (bench/train_peers.py --peers DIR does) and `import mamba_ssm` works.
The extensions load only into the torch they were built with (the same version and CUDA):
build them with the PyTorch of the machine that runs the benchmark, or one of the same
version. The packages' setup.py files try to download prebuilt wheels; this script never
runs them.
"""
import argparse
import concurrent.futures
import glob
import json
import multiprocessing
import os
import shutil
import sys
import tarfile
import time

NVCC_FLAGS = [
    "-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo",
    # Compile each file's device code on several threads: the largest files (dozens of
    # template instantiations) otherwise set the build's time alone.
    "--split-compile=0",
]

# extension name, the package it comes with, its sources inside the package, include dir
EXTENSIONS = [
    ("selective_scan_cuda", "mamba_ssm", [
        "csrc/selective_scan/selective_scan.cpp",
        *[f"csrc/selective_scan/selective_scan_fwd_{t}.cu" for t in ("fp32", "fp16", "bf16")],
        *[f"csrc/selective_scan/selective_scan_bwd_{t}_{k}.cu"
          for t in ("fp32", "fp16", "bf16") for k in ("real", "complex")],
    ], "csrc/selective_scan"),
    ("causal_conv1d_cuda", "causal_conv1d", [
        "csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu", "csrc/causal_conv1d_bwd.cu",
        "csrc/causal_conv1d_update.cu",
    ], "csrc"),
]


def unpack(sdist_dir, package, out):
    """The unpacked source tree of `package` (mamba_ssm or causal_conv1d) under out."""
    pattern = package + "-*"
    folders = [p for p in glob.glob(os.path.join(sdist_dir, pattern)) if os.path.isdir(p)]
    if folders:
        return sorted(folders)[-1]
    archives = sorted(glob.glob(os.path.join(sdist_dir, pattern + ".tar.gz")))
    if not archives:
        sys.exit(f"build_peers: no {pattern}.tar.gz or folder in {sdist_dir}")
    with tarfile.open(archives[-1]) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(out, filter="data")
    return os.path.join(out, top)


def build(name, source_root, sources, include, out, arch):
    from torch.utils.cpp_extension import load

    start = time.time()
    build_dir = os.path.join(out, "build-" + name)
    os.makedirs(build_dir, exist_ok=True)
    module = load(
        name=name,
        sources=[os.path.join(source_root, s) for s in sources],
        extra_cflags=["-O3", "-std=c++17"],
        extra_cuda_cflags=NVCC_FLAGS + [f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        extra_include_paths=[os.path.join(source_root, include)],
        build_directory=build_dir,
        verbose=False,
    )
    built = module.__file__
    shutil.copy2(built, os.path.join(out, os.path.basename(built)))
    print(f"build_peers: {name} built in {time.time() - start:.0f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", required=True, help="folder with the two source distributions")
    parser.add_argument("--out", required=True, help="folder for the extensions and Python packages")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel compiler jobs")
    parser.add_argument("--arch", default="90", help="the one compute capability to build for")
    parser.add_argument("--only", default="", help="comma-separated extension names (default: both)")
    args = parser.parse_args()

    os.environ["MAX_JOBS"] = str(args.jobs)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{args.arch[0]}.{args.arch[1:]}")
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)
    import torch

    wanted = set(filter(None, args.only.split(",")))
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "arch": args.arch, "packages": {}}
    builds = []
    for name, package, sources, include in EXTENSIONS:
        root = unpack(args.sdist, package, out)
        info["packages"][package] = os.path.basename(root)
        target = os.path.join(out, package)
        if not os.path.isdir(target):
            shutil.copytree(os.path.join(root, package), target)
        if not wanted or name in wanted:
            builds.append((name, root, sources, include, out, args.arch))
    # The two extensions build side by side, each in its own process (torch's builder
    # keeps global state): the build then takes as long as the slower one.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(builds) or 1, mp_context=context) as pool:
        for done in [pool.submit(build, *b) for b in builds]:
            done.result()
    with open(os.path.join(out, "peers.json"), "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
