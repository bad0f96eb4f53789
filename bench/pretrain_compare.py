#!/usr/bin/env python3
"""One VideoMAE pretraining step, tubelet against transformers' VideoMAEForPreTraining in PyTorch
(eager), on this machine, in one interleaved run (issue 14): VideoMAE-B (transformers'
VideoMAEConfig defaults: 16 x 224², tubelet 2 x 16 x 16, decoder 384 wide, 4 blocks, 6 heads,
norm_pix_loss), random weights saved once with save_pretrained, tube mask ratio 0.9, batch 2.

A step is the forward (encoder over the visible tokens, decoder over every token), the MSE of
the masked tokens' patches, and the backward into every parameter gradient; no optimizer step
on either side (the gradients accumulate across steps on both). Every clip masks the same count
(int(0.9 * 196) positions per temporal slice, the same positions in every slice: VideoMAE's
TubeMaskingGenerator), a new mask per step on both sides.

  tubelet  build/tubelet bench --model DIR --train --mask-ratio 0.9 --batch 2 --threads T --json
  torch    a fresh process: torch.set_num_threads(T), VideoMAEForPreTraining.from_pretrained(DIR),
           model.train(), the model's default attention (sdpa), loss.backward()

Each (peer, round) is its own process; the rounds interleave the peers. Peak RSS is the
process's (os.wait4). GFLOP/s counts 3 x the forward FLOPs of `tubelet info` for both peers
(the visible-token encoder + the decoder); the FP32 FMA peak is measured by build/fma_peak in
the same run.

Usage: /work/venv/bin/python bench/pretrain_compare.py [--threads 2] [--batch 2] [--rounds 3]
           [--repeats 3] [--warmup 1] [--mask-ratio 0.9] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "bench", "out", "pretrain-videomae-base")


def make_model():
    if os.path.exists(os.path.join(MODEL_DIR, "model.safetensors")):
        return
    import torch
    from transformers import VideoMAEConfig, VideoMAEForPreTraining
    torch.manual_seed(0)
    VideoMAEForPreTraining(VideoMAEConfig()).save_pretrained(MODEL_DIR)


def torch_peer(threads, batch, repeats, warmup, ratio):
    import numpy as np
    import torch
    from transformers import VideoMAEForPreTraining
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    m = VideoMAEForPreTraining.from_pretrained(MODEL_DIR).train()
    c = m.config
    t, hw = c.num_frames // c.tubelet_size, (c.image_size // c.patch_size) ** 2
    x = torch.rand(batch, c.num_frames, 3, c.image_size, c.image_size) * 2 - 1
    rng = np.random.default_rng(0)
    ts = []
    for i in range(warmup + repeats):
        mask = np.zeros((batch, hw), bool)
        for b in range(batch):
            mask[b, rng.permutation(hw)[: int(ratio * hw)]] = True
        pos = torch.from_numpy(np.tile(mask, (1, t)))
        t0 = time.perf_counter()
        loss = m(pixel_values=x, bool_masked_pos=pos).loss
        loss.backward()
        if i >= warmup:
            ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def main():
    import compare as C
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--mask-ratio", type=float, default=0.9)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma_peak"))
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        print(json.dumps({"ms": torch_peer(a.threads, a.batch, a.repeats, a.warmup, a.mask_ratio)}))
        return
    make_model()
    cpu, isa = C.cpu_and_isa()
    print(f"CPU: {cpu} ({isa}), loadavg before: {open('/proc/loadavg').read().strip()}", flush=True)
    peak = C.fma_peak(a.fma_peak, a.threads)
    print(f"FP32 FMA peak at {a.threads} threads: {peak.get('gflops', '?')} GFLOP/s", flush=True)
    common = ["--threads", str(a.threads), "--repeats", str(a.repeats), "--warmup", str(a.warmup)]
    cmds = {
        "tubelet": [a.tubelet, "bench", "--model", MODEL_DIR, "--train", "--mask-ratio",
                    str(a.mask_ratio), "--batch", str(a.batch), "--json"] + common,
        "torch": [sys.executable, __file__, "--peer", "--batch", str(a.batch), "--mask-ratio",
                  str(a.mask_ratio)] + common,
    }
    rows, gflop = {}, None
    for r in range(a.rounds):
        for peer, cmd in cmds.items():
            res = C.run_child(cmd, 3600)
            ms = None
            if res["rc"] == 0:
                j = json.loads(res["stdout"].strip().splitlines()[-1])
                ms = j["ms_median"] if peer == "tubelet" else j["ms"]
                if peer == "tubelet":
                    gflop = j["gflop_per_clip"] * a.batch
            rows.setdefault(peer, []).append({"ms": ms, "rss": res["peak_rss_mb"],
                                              "other_load": res["other_load_lifetime"]})
            print(f"round {r + 1} {peer:8s} " +
                  (f"{ms:9.1f} ms  {res['peak_rss_mb']:7.0f} MB  other load {res['other_load_lifetime']:.2f}"
                   if ms else f"failed: {res['stderr'].strip()[-400:]}"), flush=True)
    print(f"loadavg after: {open('/proc/loadavg').read().strip()}\n")
    print(f"| peer | ms per step (median of {a.rounds} rounds) | spread | GFLOP/s | % of peak | peak RSS MB | time vs tubelet |")
    print("|---|---|---|---|---|---|---|")
    tb = statistics.median([x["ms"] for x in rows["tubelet"] if x["ms"]])
    for peer in cmds:
        ms = [x["ms"] for x in rows[peer] if x["ms"]]
        if not ms:
            print(f"| {peer} | failed | | | | | |")
            continue
        med = statistics.median(ms)
        gf = gflop / (med / 1e3) if gflop else 0
        pk = 100 * gf / peak["gflops"] if peak.get("ok") else 0
        print(f"| {peer} | {med:.0f} | {min(ms):.0f}-{max(ms):.0f} | {gf:.1f} | {pk:.0f} % | "
              f"{max(x['rss'] for x in rows[peer]):.0f} | {med / tb:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "isa": isa, "peak": peak, "gflop_per_step": gflop,
                       "batch": a.batch, "mask_ratio": a.mask_ratio, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
