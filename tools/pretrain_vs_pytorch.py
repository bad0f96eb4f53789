#!/usr/bin/env python3
"""Does `tubelet pretrain` optimise as a PyTorch loop over transformers' VideoMAEForPreTraining
does? (issue 14: rule out the trainer before blaming the model)

Both engines start from the same weights (transformers' initialisation, seeded, saved once with
save_pretrained), read the same decoded clips, and follow the same recipe: AdamW (betas 0.9 /
0.95, eps 1e-8, weight decay 0.05 on matrices only), lr warm-up then cosine to 1e-6, per step,
batch B, tube masks at the same ratio (one spatial mask repeated over time, the same count in
every clip). No augmentation on either side (`min_scale` 1; the clips have as many frames as
the model, so TSN sampling takes every frame), pixels scaled to [0, 1] and normalised with mean
and std 0.5 (what tubelet's processor does for a directory without preprocessor_config.json). The masks and the batch order are drawn by each engine from its own
generator (the same distributions, not the same draws).

Usage (needs torch, transformers, av; `make` first):
  /work/venv/bin/python tools/pretrain_vs_pytorch.py --data DIR -o OUT --config CONFIG.json
      [--epochs 4] [--batch 32] [--lr 1e-3] [--warmup 5] [--mask-ratio 0.75] [--threads 1]

DIR is a `tubelet synth` output (train.csv, val.csv); CONFIG.json a VideoMAEForPreTraining
config. Writes OUT/curves.csv (engine, epoch, train_loss) and prints them side by side.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_vs_pytorch import ROOT, decode_all  # noqa: E402


def torch_curve(init, train_paths, a):
    import numpy as np
    import torch
    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    clips = decode_all(train_paths)
    X = torch.stack([(torch.from_numpy(clips[p]).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5
                     for p in train_paths])
    m = transformers.VideoMAEForPreTraining.from_pretrained(init).train()
    decay, no_decay = [], []
    for name, p in m.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith("mask_token") else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    c = m.config
    t, hw = c.num_frames // c.tubelet_size, (c.image_size // c.patch_size) ** 2
    n_masked = int(a.mask_ratio * hw)
    rng = np.random.default_rng(0)
    S = (len(X) + a.batch - 1) // a.batch
    warm, total = a.warmup * S, a.epochs * S
    step, curve = 0, []
    for epoch in range(a.epochs):
        order, losses = torch.randperm(len(X)), []
        for s in range(S):
            lr = a.lr * step / warm if step < warm else \
                1e-6 + (a.lr - 1e-6) * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
            for g in opt.param_groups:
                g["lr"] = lr
            idx = order[s * a.batch:(s + 1) * a.batch]
            mask = np.zeros((len(idx), hw), bool)
            for i in range(len(idx)):
                mask[i, rng.permutation(hw)[:n_masked]] = True
            loss = m(pixel_values=X[idx], bool_masked_pos=torch.from_numpy(np.tile(mask, (1, t)))).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            losses.append(loss.item())
        curve.append(sum(losses) / len(losses))
        print(f"torch epoch {epoch + 1}: {curve[-1]:.6f}", flush=True)
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mask-ratio", type=float, default=0.75)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    a = ap.parse_args()
    import torch
    import transformers
    os.makedirs(a.out, exist_ok=True)
    init = os.path.join(a.out, "init")
    cfg = {k: v for k, v in json.load(open(a.config)).items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    transformers.VideoMAEForPreTraining(transformers.VideoMAEConfig(**cfg)).save_pretrained(init)
    with open(os.path.join(a.data, "train.csv")) as f:
        train = [os.path.join(a.data, r["path"]) for r in csv.DictReader(f)]
    with open(os.path.join(a.out, "recipe.json"), "w") as f:
        json.dump({"warmup_epochs": a.warmup, "min_scale": 1.0}, f)
    run = os.path.join(a.out, "tubelet")
    subprocess.run([a.tubelet, "pretrain", "--model", init, "--videos", os.path.join(a.data, "train.csv"),
                    "--val", os.path.join(a.data, "val.csv"), "-o", run, "--mask-ratio", str(a.mask_ratio),
                    "--epochs", str(a.epochs), "--batch", str(a.batch), "--lr", str(a.lr * 256 / a.batch),
                    "--threads", str(a.threads), "--config", os.path.join(a.out, "recipe.json")],
                   check=True, stderr=subprocess.DEVNULL)
    with open(os.path.join(run, "metrics.csv")) as f:
        tb = [float(r["train_loss"]) for r in csv.DictReader(f)]
    pt = torch_curve(init, train, a)
    with open(os.path.join(a.out, "curves.csv"), "w") as f:
        f.write("engine,epoch,train_loss\n")
        for name, c in (("tubelet", tb), ("torch", pt)):
            for i, v in enumerate(c):
                f.write(f"{name},{i + 1},{v:.6f}\n")
    print("| epoch | tubelet train loss | PyTorch train loss |\n|---|---|---|")
    for i, (x, y) in enumerate(zip(tb, pt)):
        print(f"| {i + 1} | {x:.4f} | {y:.4f} |")


if __name__ == "__main__":
    main()
