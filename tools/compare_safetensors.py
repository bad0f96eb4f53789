#!/usr/bin/env python3
"""Largest relative difference between the tensors of two safetensors files (numpy only).

Usage: compare_safetensors.py A B [TOL]; exits 1 if a tensor differs by more than TOL (default
1e-5) relative to max(1e-12, max|A|), or the names, dtypes or shapes differ."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    if a.keys() != b.keys():
        print("different tensor names")
        return 1
    worst, where = 0.0, ""
    for k in a:
        if a[k].shape != b[k].shape or a[k].dtype != b[k].dtype:
            print(f"{k}: shape or dtype differs")
            return 1
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        rel = float(np.abs(x - y).max(initial=0) / max(1e-12, float(np.abs(x).max(initial=0))))
        if rel > worst:
            worst, where = rel, k
    print(f"worst relative difference {worst:.3g} ({where})")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
