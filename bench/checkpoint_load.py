#!/usr/bin/env python3
"""Loading a VideoMAE-B checkpoint as published (.pth, random weights at the published shapes:
86.5 M parameters, Kinetics-400 head): tubelet (the file directly, both of torch's
serialisations) against torch.load and against safetensors (mmap) of the same weights. Each
measurement runs in a fresh process, files in the page cache (each is read once before), median of
--rounds. Reported: wall seconds of the load alone, and the process's peak RSS.

    tubelet      `tubelet info --model FILE`: parse, map, build the model (fp32; f32 weights in
                 place from the mapping, so their pages come in on first use)
    torch.load   torch.load(FILE, map_location="cpu", weights_only=True) (reads every byte)
    torch mmap   torch.load(..., mmap=True) (zip format only)
    safetensors  safetensors.torch.load_file (mmap'd, copied into tensors)

Usage: /work/venv/bin/python bench/checkpoint_load.py [--tubelet build/tubelet] [--rounds 3]
Writes bench/out/ckpt/ (about 1.4 GB) and prints a Markdown table.
"""
import argparse
import collections
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable

# Python's peak RSS is set by importing torch (~1 GB here), so the Python rows report how much
# the resident set grew during the load (current RSS after minus before).
RSS = "def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20\n"
TORCH_LOAD = RSS + r"""
import sys, time
import torch
r0 = rss(); t1 = time.perf_counter()
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True, mmap=sys.argv[2] == "1")
t2 = time.perf_counter()
print(t2 - t1, rss() - r0)
"""
ST_LOAD = RSS + r"""
import sys, time
import torch
from safetensors.torch import load_file
r0 = rss(); t1 = time.perf_counter()
sd = load_file(sys.argv[1])
t2 = time.perf_counter()
print(t2 - t1, rss() - r0)
"""
BASELINE = RSS + r"""
import time
t0 = time.perf_counter()
import torch, safetensors.torch
print(time.perf_counter() - t0, rss())
"""


def make(out):
    import torch
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    D, L, I, K = 768, 12, 3072, 400
    g = torch.Generator().manual_seed(0)
    sd = collections.OrderedDict()
    sd["patch_embed.proj.weight"] = torch.randn(D, 3, 2, 16, 16, generator=g) * 0.02
    sd["patch_embed.proj.bias"] = torch.zeros(D)
    for i in range(L):
        b = f"blocks.{i}."
        for n, s in [("norm1.weight", (D,)), ("norm1.bias", (D,)), ("attn.qkv.weight", (3 * D, D)),
                     ("attn.q_bias", (D,)), ("attn.v_bias", (D,)), ("attn.proj.weight", (D, D)),
                     ("attn.proj.bias", (D,)), ("norm2.weight", (D,)), ("norm2.bias", (D,)),
                     ("mlp.fc1.weight", (I, D)), ("mlp.fc1.bias", (I,)), ("mlp.fc2.weight", (D, I)),
                     ("mlp.fc2.bias", (D,))]:
            sd[b + n] = torch.randn(*s, generator=g) * 0.02
    sd["fc_norm.weight"], sd["fc_norm.bias"] = torch.ones(D), torch.zeros(D)
    sd["head.weight"], sd["head.bias"] = torch.randn(K, D, generator=g) * 0.02, torch.zeros(K)
    obj = {"model": sd, "epoch": 0}
    torch.save(obj, os.path.join(out, "videomae_b.pth"))
    torch.save(obj, os.path.join(out, "videomae_b_legacy.pth"), _use_new_zipfile_serialization=False)
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(out, "videomae_b.safetensors"))
    return sum(v.numel() for v in sd.values())


def run_py(script, *args):
    r = subprocess.run([PY, "-c", script, *args], capture_output=True, text=True, check=True)
    t, rss = r.stdout.split()
    return float(t), float(rss)


def run_tubelet(binary, path):
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", binary, "info", "--model", path, "--threads", "2"],
                       capture_output=True, text=True, check=True)
    t = time.perf_counter() - t0
    return t, float(r.stderr.strip().splitlines()[-1]) / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tubelet", default=os.path.join(REPO, "build", "tubelet"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = os.path.join(REPO, "bench", "out", "ckpt")
    n = make(out)
    files = {k: os.path.join(out, f) for k, f in
             [("zip", "videomae_b.pth"), ("legacy", "videomae_b_legacy.pth"), ("st", "videomae_b.safetensors")]}
    for f in files.values():  # into the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    rows = collections.OrderedDict([
        ("tubelet, zip .pth", lambda: run_tubelet(args.tubelet, files["zip"])),
        ("tubelet, legacy .pth", lambda: run_tubelet(args.tubelet, files["legacy"])),
        ("torch.load, zip .pth", lambda: run_py(TORCH_LOAD, files["zip"], "0")),
        ("torch.load(mmap=True), zip .pth", lambda: run_py(TORCH_LOAD, files["zip"], "1")),
        ("torch.load, legacy .pth", lambda: run_py(TORCH_LOAD, files["legacy"], "0")),
        ("safetensors load_file", lambda: run_py(ST_LOAD, files["st"])),
        ("(importing torch + safetensors: time, RSS)", lambda: run_py(BASELINE)),
    ])
    res = {k: [] for k in rows}
    for _ in range(args.rounds):  # interleaved
        for k, fn in rows.items():
            res[k].append(fn())
    print(f"{n / 1e6:.1f} M parameters, {os.path.getsize(files['zip']) / 1e6:.0f} MB; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"median of {args.rounds}, {time.strftime('%Y-%m-%d')}\n")
    print("| loader | load s | RSS MB (tubelet: process peak; Python: growth during the load) |\n|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {statistics.median(x[0] for x in v):.3f} | {statistics.median(x[1] for x in v):.0f} |")


if __name__ == "__main__":
    main()
