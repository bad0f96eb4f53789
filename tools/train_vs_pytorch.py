#!/usr/bin/env python3
"""Does `tubelet train` learn as PyTorch would? (issue 14, "First")

Trains the same small model, from the same initial weights, on the same clips with the same
recipe, once with `tubelet train` and once in PyTorch with transformers' model, for several seeds,
and writes both learning curves side by side.

  data      `tubelet synth` (12 motion classes in opposite pairs; distractors and noise as given)
  model     TimesformerForVideoClassification, divided space-time attention, hidden 64, 3 layers,
            4 heads, MLP 256, 32 x 32 x 8, patch 8 (the issue's example), initialised by
            transformers (seeded) and saved with save_pretrained: both engines start from it
  recipe    the trainer's defaults on both sides: AdamW (betas 0.9 / 0.999, eps 1e-8, weight
            decay 0.05 on matrices only: not on biases, norms, position / time embeddings, cls),
            linear warm-up for 1 epoch then cosine to 1e-6, per step; batch 8 (the last batch of
            an epoch smaller); cross-entropy; no dropout; training clips: TSN sampling (a random
            frame in each of T equal segments) and a random resized crop (area 0.5-1, aspect
            3/4-4/3, torchvision's rule) resized to 32 x 32, no flip; validation: the centre frame
            of each segment, the whole frame. Pixels scaled to [0, 1] and normalised with mean and
            std 0.5 (the preprocessor_config.json written beside the weights).
  PyTorch   the clips decoded once with PyAV; the draws of sampling, cropping and order come from
            torch's generator (the same distribution as tubelet's, not the same draws).

Usage (needs torch, transformers, av; `make` first):
  /work/venv/bin/python tools/train_vs_pytorch.py -o bench/out/train_vs_pytorch \
      [--seeds 0 1 2] [--epochs 30] [--per-class 60] [--distractors 3] [--noise 1] [--threads 1]

Writes OUT/curves.csv (engine, seed, epoch, train_loss, val_loss, val_acc), OUT/summary.md and,
if matplotlib is installed, OUT/curves.png.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_config(labels, size, frames, patch):
    return {"architectures": ["TimesformerForVideoClassification"], "model_type": "timesformer",
            "image_size": size, "patch_size": patch, "num_frames": frames, "num_channels": 3,
            "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
            "intermediate_size": 256, "hidden_act": "gelu", "attention_type": "divided_space_time",
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0,
            "layer_norm_eps": 1e-6, "qkv_bias": True, "initializer_range": 0.02,
            "id2label": {str(i): l for i, l in enumerate(labels)},
            "label2id": {l: i for i, l in enumerate(labels)}}


def make_init(out, labels, size, frames, patch, seed):
    import torch
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.TimesformerConfig(**model_config(labels, size, frames, patch))
    model = transformers.TimesformerForVideoClassification(cfg)
    model.save_pretrained(out)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "VideoMAEImageProcessor", "do_resize": True,
                   "size": {"shortest_edge": size}, "do_center_crop": True,
                   "crop_size": {"height": size, "width": size}, "do_rescale": True,
                   "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
                   "image_std": [0.5] * 3, "resample": 2}, f, indent=1)


def read_csv(path, labels):
    base = os.path.dirname(path)
    with open(path) as f:
        return [(os.path.join(base, r["path"]), labels.index(r["label"])) for r in csv.DictReader(f)]


def decode_all(paths):
    import av
    import numpy as np
    clips = {}
    for p in paths:
        with av.open(p) as c:
            clips[p] = np.stack([fr.to_ndarray(format="rgb24") for fr in c.decode(video=0)])
    return clips


def train_pixels(video, T, size, g):
    """TSN sampling and the random resized crop of tubelet's data.c, drawn from torch's g."""
    import torch
    import torch.nn.functional as F
    n, h, w = video.shape[0], video.shape[1], video.shape[2]
    u = lambda: float(torch.rand((), generator=g))  # noqa: E731
    idx = [min(int(t * n / T + u() * (n / T)), n - 1) for t in range(T)]
    ch = cw = min(h, w)
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    for _ in range(10):
        area = h * w * (0.5 + 0.5 * u())
        ar = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u())
        tw, th = round(math.sqrt(area * ar)), round(math.sqrt(area / ar))
        if 1 <= tw <= w and 1 <= th <= h:
            cw, ch = tw, th
            y0, x0 = int(u() * (h - th + 1)), int(u() * (w - tw + 1))
            break
    x = torch.from_numpy(video[idx, y0:y0 + ch, x0:x0 + cw]).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return (x / 255 - 0.5) / 0.5


def val_pixels(video, T):
    import torch
    n = video.shape[0]
    idx = [min(int((t + 0.5) * n / T), n - 1) for t in range(T)]
    x = torch.from_numpy(video[idx]).permute(0, 3, 1, 2).float()
    return (x / 255 - 0.5) / 0.5


def run_torch(init_dir, train, val, clips, a, seed):
    import torch
    import transformers
    torch.manual_seed(seed)
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(seed)
    model = transformers.TimesformerForVideoClassification.from_pretrained(init_dir)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        skip = p.ndim <= 1 or any(k in name for k in ("position_embeddings", "cls_token", "time_embeddings"))
        (no_decay if skip else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    S = (len(train) + a.batch - 1) // a.batch
    warm, total = S * 1, S * a.epochs

    def lr_at(t):
        if t < warm:
            return a.lr * (t + 1) / warm
        x = (t - warm) / max(1, total - warm)
        return 1e-6 + 0.5 * (a.lr - 1e-6) * (1 + math.cos(math.pi * x))

    xv = torch.stack([val_pixels(clips[p], a.frames) for p, _ in val])
    yv = torch.tensor([y for _, y in val])
    rows, t = [], 0
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(len(train), generator=g).tolist()
        tot, n = 0.0, 0
        for s in range(S):
            batch = [train[i] for i in order[s * a.batch:(s + 1) * a.batch]]
            x = torch.stack([train_pixels(clips[p], a.frames, a.size, g) for p, _ in batch])
            y = torch.tensor([lab for _, lab in batch])
            for grp in opt.param_groups:
                grp["lr"] = lr_at(t)
            loss = torch.nn.functional.cross_entropy(model(pixel_values=x).logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t += 1
            tot += loss.item() * len(batch)
            n += len(batch)
        model.eval()
        with torch.no_grad():
            logits = torch.cat([model(pixel_values=xv[i:i + 16]).logits for i in range(0, len(xv), 16)])
        vl = float(torch.nn.functional.cross_entropy(logits, yv))
        acc = float((logits.argmax(1) == yv).float().mean())
        rows.append({"engine": "pytorch", "seed": seed, "epoch": epoch, "train_loss": tot / n,
                     "val_loss": vl, "val_acc": acc})
        print(f"  pytorch seed {seed} epoch {epoch}: train {tot / n:.4f} val {vl:.4f} acc {acc:.3f}", flush=True)
    return rows


def run_tubelet(init_dir, data, out, a, seed):
    run = os.path.join(out, f"tubelet_seed{seed}")
    subprocess.run(["rm", "-rf", run], check=True)
    subprocess.run([a.tubelet, "train", "--model", init_dir, "--train", os.path.join(data, "train.csv"),
                    "--val", os.path.join(data, "val.csv"), "-o", run, "--epochs", str(a.epochs),
                    "--batch", str(a.batch), "--lr", str(a.lr), "--seed", str(seed),
                    "--threads", str(a.threads)], check=True, stderr=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(run, "metrics.csv")) as f:
        return [{"engine": "tubelet", "seed": seed, "epoch": int(r["epoch"]),
                 "train_loss": float(r["train_loss"]), "val_loss": float(r["val_loss"]),
                 "val_acc": float(r["val_acc"])} for r in csv.DictReader(f)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "bench", "out", "train_vs_pytorch"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--per-class", type=int, default=60)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--patch", type=int, default=8)
    ap.add_argument("--distractors", type=int, default=3)
    ap.add_argument("--noise", type=float, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data = os.path.join(a.out, "synth")
    if not os.path.exists(os.path.join(data, "train.csv")):
        subprocess.run([a.tubelet, "synth", "-o", data, "--per-class", str(a.per_class), "--frames",
                        str(a.frames), "--size", str(a.size), "--seed", "0", "--distractors",
                        str(a.distractors), "--noise", str(a.noise)], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(data, "labels.txt")) as f:
        labels = [l.strip() for l in f if l.strip()]
    train, val = read_csv(os.path.join(data, "train.csv"), labels), read_csv(os.path.join(data, "val.csv"), labels)
    clips = decode_all([p for p, _ in train + val])
    rows = []
    for seed in a.seeds:
        init_dir = os.path.join(a.out, f"init_seed{seed}")
        make_init(init_dir, labels, a.size, a.frames, a.patch, seed)
        t0 = time.time()
        rows += run_tubelet(init_dir, data, a.out, a, seed)
        t1 = time.time()
        rows += run_torch(init_dir, train, val, clips, a, seed)
        print(f"seed {seed}: tubelet {t1 - t0:.0f} s, pytorch {time.time() - t1:.0f} s", flush=True)
    with open(os.path.join(a.out, "curves.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    L = [f"{len(train)} training / {len(val)} validation clips, {len(labels)} classes (chance "
         f"{1 / len(labels):.3f}), {a.epochs} epochs, batch {a.batch}, lr {a.lr}", "",
         "| seed | engine | train loss, epoch 1 / last | val loss, last | val acc: last / best |",
         "|---|---|---|---|---|"]
    for seed in a.seeds:
        for eng in ("tubelet", "pytorch"):
            r = [x for x in rows if x["seed"] == seed and x["engine"] == eng]
            L.append(f"| {seed} | {eng} | {r[0]['train_loss']:.4f} / {r[-1]['train_loss']:.4f} | "
                     f"{r[-1]['val_loss']:.4f} | {r[-1]['val_acc']:.3f} / {max(x['val_acc'] for x in r):.3f} |")
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for seed in a.seeds:
        for eng, style in (("tubelet", "-"), ("pytorch", "--")):
            r = [x for x in rows if x["seed"] == seed and x["engine"] == eng]
            ax[0].plot([x["epoch"] for x in r], [x["train_loss"] for x in r], style, label=f"{eng} seed {seed}")
            ax[1].plot([x["epoch"] for x in r], [x["val_acc"] for x in r], style, label=f"{eng} seed {seed}")
    ax[0].set_title("train loss"), ax[1].set_title("validation accuracy")
    ax[1].legend(fontsize=7)
    fig.savefig(os.path.join(a.out, "curves.png"), dpi=100, bbox_inches="tight")


if __name__ == "__main__":
    sys.exit(main())
