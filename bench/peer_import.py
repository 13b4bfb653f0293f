"""Imports the reference kernels' Python modules from the folder bench/build_peers.py filled,
for the peer benchmarks (train_peers.py, scan_peers.py, peers.py).

mamba_ssm's package __init__ imports every model family it has, some of which need packages
the benchmarks never use; the modules the benchmarks need are loaded without running it.
"""
import importlib
import os
import sys
import types


def add_peer_dir(peer_dir):
    """Puts the built extensions and the packages' Python code on sys.path."""
    path = os.path.abspath(peer_dir)
    if not os.path.isdir(os.path.join(path, "mamba_ssm")):
        raise SystemExit(f"{peer_dir}: no mamba_ssm folder (run bench/build_peers.py --out {peer_dir})")
    if path not in sys.path:
        sys.path.insert(0, path)
    if "mamba_ssm" not in sys.modules:
        package = types.ModuleType("mamba_ssm")
        package.__path__ = [os.path.join(path, "mamba_ssm")]
        sys.modules["mamba_ssm"] = package


def mamba_module(peer_dir, name):
    """A module of mamba_ssm by its dotted name under the package ("ops.selective_scan_interface")."""
    add_peer_dir(peer_dir)
    return importlib.import_module("mamba_ssm." + name)


def causal_conv1d_fn(peer_dir):
    add_peer_dir(peer_dir)
    return importlib.import_module("causal_conv1d").causal_conv1d_fn
