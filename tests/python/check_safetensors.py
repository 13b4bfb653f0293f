#!/usr/bin/env python3
"""Checks tapegrad checkpoints with Python's own safetensors reader.

Usage: check_safetensors.py WRITE_CHECKPOINT WORK_DIR

1. The C program writes f32, f64 and bf16 checkpoints (AdamW, momentum SGD, AdamW with
   master weights) and, beside each, a JSON list of what the file must hold.
2. safetensors (numpy) reads each: the names, dtypes, shapes and values must be exactly
   those, the metadata too, and the file's CRC-32 (file_crc32: the whole file with those
   8 digits read as zeros) must be zlib's.
3. Python writes a checkpoint of its own with safetensors.numpy.save_file (its own
   layout: other order, other padding); the C program loads it and saves it again, and
   the result must hold the same tensors and metadata.

Exits 77 (a skip for ctest) when numpy or safetensors cannot be imported.
"""
import json
import os
import random
import struct
import subprocess
import sys
import zlib

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as error:
    print(f"skipped: {error} (pip install safetensors numpy)")
    sys.exit(77)

NUMPY_DTYPES = {"F32": np.float32, "F64": np.float64}


def data_section(path):
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


CRC_KEY = b'"file_crc32":"'


def file_crc(raw):
    """zlib's CRC-32 of the whole file with the 8 digits of file_crc32 read as zeros, and where they are."""
    (length,) = struct.unpack("<Q", raw[:8])
    at = raw.find(CRC_KEY, 8, 8 + length)
    assert at > 0 and raw.find(CRC_KEY, at + 1, 8 + length) < 0, "one file_crc32 entry in the header"
    at += len(CRC_KEY)
    return zlib.crc32(raw[:at] + b"00000000" + raw[at + 8 :]), at


def bf16_values(header, data, name):
    """safetensors has no numpy dtype for bf16: widen the raw 16-bit words by hand."""
    begin, end = header[name]["data_offsets"]
    words = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
    return words.view(np.float32)


def check_file(path, reference):
    header, data = data_section(path)
    want = reference["tensors"]
    with safe_open(path, framework="numpy") as f:
        names = set(f.keys())
        assert names == set(want), f"{path}: names differ: {sorted(names ^ set(want))}"
        metadata = f.metadata()
        for name in sorted(names):
            entry = want[name]
            piece = f.get_slice(name)
            assert piece.get_dtype() == entry["dtype"], f"{name}: dtype {piece.get_dtype()}, expected {entry['dtype']}"
            assert list(piece.get_shape()) == entry["shape"], f"{name}: shape {piece.get_shape()} vs {entry['shape']}"
            if entry["dtype"] == "BF16":
                values = bf16_values(header, data, name).reshape(entry["shape"])
            else:
                values = f.get_tensor(name)
                assert values.dtype == NUMPY_DTYPES[entry["dtype"]], f"{name}: numpy dtype {values.dtype}"
            expected = np.array(entry["values"], dtype=np.float64).reshape(entry["shape"])
            assert np.array_equal(values.astype(np.float64), expected), f"{path}: {name}: values differ"
    for key, value in reference["metadata"].items():
        assert metadata.get(key) == value, f"{path}: metadata {key} is {metadata.get(key)!r}, expected {value!r}"
    with open(path, "rb") as f:
        crc = f"{file_crc(f.read())[0]:08x}"
    assert metadata["file_crc32"] == crc, f"{path}: file_crc32 {metadata['file_crc32']}, zlib says {crc}"
    if "BF16" not in {e["dtype"] for e in want.values()}:
        loaded = load_file(path)  # the one-call reader too
        assert set(loaded) == set(want)
    return len(names)


def python_written_round_trip(tool, work, reference):
    """A checkpoint laid out by safetensors itself loads in C, and C saves the same back."""
    tensors = {
        name: np.array(entry["values"], dtype=NUMPY_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        for name, entry in reference["tensors"].items()
    }
    metadata = dict(reference["metadata"], file_crc32="00000000")
    path = os.path.join(work, "from_python.safetensors")
    save_file(tensors, path, metadata=metadata)
    with open(path, "rb") as f:  # the CRC goes into the digits' place, the file's length unchanged
        raw = bytearray(f.read())
    crc, at = file_crc(bytes(raw))
    raw[at : at + 8] = f"{crc:08x}".encode()
    with open(path, "wb") as f:
        f.write(raw)
    again = os.path.join(work, "resaved.safetensors")
    subprocess.run([tool, "resave", path, again], check=True)
    return check_file(again, reference)


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    seed = random.SystemRandom().randrange(1 << 62)
    print(f"seed {seed}")
    subprocess.run([tool, "write", work, str(seed)], check=True)
    counted = 0
    for name in ("f32", "f64", "bf16"):
        with open(os.path.join(work, f"{name}.json")) as f:
            reference = json.load(f)
        counted += check_file(os.path.join(work, f"{name}.safetensors"), reference)
        if name == "f32":
            counted += python_written_round_trip(tool, work, reference)
    print(f"{counted} tensors read by safetensors {__import__('safetensors').__version__} match what C wrote")


if __name__ == "__main__":
    main()
