#!/usr/bin/env python3
"""Loading a ViViT-B scenic checkpoint as published (Flax msgpack, random weights at the shapes of
scenic's vivit_base_16x2_unfactorized: 32 x 224^2, tubelet 2 x 16 x 16, Kinetics-400 head, inside
{"optimizer": {"target": params, "state": {"step", "param_states": momentum}}, ...} as flax.optim
saved it): tubelet against flax's own reader. Each measurement runs in a fresh process, the file
in the page cache (read once before), median of --rounds.

    tubelet          `tubelet info --model FILE`: the whole process (header walk, msgpack-c,
                     the parameters' tree, name map, Flax layouts to torch's, model build)
    flax restore     flax.serialization.msgpack_restore(open(FILE).read()) (every array of the
                     train state, momentum included, decoded into numpy)

Usage: PY bench/flax_load.py [--tubelet build/tubelet] [--rounds 5]   (PY with flax: see
tools/make_flax_fixtures.py)
Writes bench/out/flax/vivit_b.msgpack (about 700 MB) and prints a Markdown table.
"""
import argparse
import os
import statistics
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAX_LOAD = r"""
import sys, time
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
from flax import serialization
r0 = rss(); t1 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    state = serialization.msgpack_restore(f.read())
print(time.perf_counter() - t1, rss() - r0)
"""


def vivit_b_params(rng):
    D, H, I, L, K = 768, 12, 3072, 12, 400
    f32 = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02)
    blk = lambda: {"LayerNorm_0": {"scale": f32(D), "bias": f32(D)},
                   "MultiHeadDotProductAttention_0": {
                       **{q: {"kernel": f32(D, H, D // H), "bias": f32(H, D // H)} for q in ("query", "key", "value")},
                       "out": {"kernel": f32(H, D // H, D), "bias": f32(D)}},
                   "LayerNorm_1": {"scale": f32(D), "bias": f32(D)},
                   "MlpBlock_0": {"Dense_0": {"kernel": f32(D, I), "bias": f32(I)},
                                  "Dense_1": {"kernel": f32(I, D), "bias": f32(D)}}}
    t = {"posembed_input": {"pos_embedding": f32(1, 16 * 196 + 1, D)},
         "encoder_norm": {"scale": f32(D), "bias": f32(D)}}
    t.update({f"encoderblock_{i}": blk() for i in range(L)})
    return {"embedding": {"kernel": f32(2, 16, 16, 3, D), "bias": f32(D)}, "cls": f32(1, 1, D),
            "Transformer": t, "output_projection": {"kernel": f32(D, K), "bias": f32(K)}}


def make(path):
    import jax
    from flax import serialization
    p = vivit_b_params(np.random.default_rng(0))
    mom = jax.tree_util.tree_map(lambda a: {"momentum": a * 0.1}, p)
    state = {"optimizer": {"target": p, "state": {"step": np.int64(30000), "param_states": mom}},
             "global_step": 30000, "model_state": {}, "rng": np.array([0, 1], dtype=np.uint32),
             "accum_train_time": 0.0}
    with open(path, "wb") as f:
        f.write(serialization.to_bytes(state))


def timed(cmd):
    """Wall seconds and peak RSS (MiB) of cmd, by GNU time; its stdout."""
    p = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, capture_output=True, text=True, check=True)
    wall, rss = p.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) / 1024, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tubelet", default=os.path.join(REPO, "build", "tubelet"))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    out = os.path.join(REPO, "bench", "out", "flax")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "vivit_b.msgpack")
    if not os.path.exists(path):
        make(path)
    with open(path, "rb") as f:  # into the page cache
        while f.read(1 << 24):
            pass
    size = os.path.getsize(path) / 2 ** 20
    tub, rss_t, flx, grow_f = [], [], [], []
    for _ in range(args.rounds):
        t, rss, _ = timed([args.tubelet, "info", "--model", path])
        tub.append(t), rss_t.append(rss)
        _, rss_f, o = timed([sys.executable, "-c", FLAX_LOAD, path])
        load, grow = (float(v) for v in o.split())
        flx.append(load), grow_f.append(grow)
    print(f"ViViT-B train state, {size:.0f} MiB (parameters and momentum), {args.rounds} rounds, median\n")
    print("| reader | seconds | memory MiB |")
    print("|---|---|---|")
    print(f"| tubelet info --model (whole process) | {statistics.median(tub):.2f} | peak RSS {statistics.median(rss_t):.0f} |")
    print(f"| flax msgpack_restore (the call alone) | {statistics.median(flx):.2f} | RSS growth {statistics.median(grow_f):.0f} |")


if __name__ == "__main__":
    main()
