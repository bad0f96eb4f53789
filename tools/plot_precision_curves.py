#!/usr/bin/env python3
"""Training curves of the motion benchmark in two precisions, seed by seed: training loss and
validation accuracy per epoch of every run of DIR_A/runs and DIR_B/runs (tools/motion_benchmark.sh
outputs, e.g. PRECISION=bf16 and PRECISION=fp32), one colour per seed, solid for A, dashed for B.
Prints each run's final and best accuracy and the first epoch at >= 0.5 (its take-off).

Usage: /work/venv/bin/python tools/plot_precision_curves.py DIR_A LABEL_A DIR_B LABEL_B OUT.png
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def runs(d):
    out = {}
    for name in sorted(os.listdir(os.path.join(d, "runs"))):
        path = os.path.join(d, "runs", name, "metrics.csv")
        if os.path.exists(path):
            with open(path) as f:
                out[name] = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    return out


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    dir_a, label_a, dir_b, label_b, png = sys.argv[1:]
    sets = [(label_a, runs(dir_a), "-"), (label_b, runs(dir_b), "--")]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = sorted(set(sets[0][1]) | set(sets[1][1]))
    for label, rs, style in sets:
        for i, name in enumerate(names):
            rows = rs.get(name)
            if not rows:
                continue
            ep = [r["epoch"] for r in rows]
            seed = name.rsplit("seed", 1)[-1]
            ax_loss.plot(ep, [r["train_loss"] for r in rows], style, color=colours[i % 10],
                         label=f"{label}, seed {seed}")
            ax_acc.plot(ep, [r["val_acc"] for r in rows], style, color=colours[i % 10])
            acc = [r["val_acc"] for r in rows]
            off = next((int(r["epoch"]) for r in rows if r["val_acc"] >= 0.5), None)
            print(f"{label:6s} {name}: final {acc[-1]:.3f}, best {max(acc):.3f}, "
                  f"take-off epoch {off if off else '-'}")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="training loss")
    ax_acc.set(xlabel="epoch", ylabel="validation accuracy", title="validation accuracy",
               ylim=(0, 1))
    ax_acc.axhline(0.25, color="grey", lw=0.5)
    ax_loss.legend(fontsize=7)
    fig.suptitle(f"motion benchmark: {label_a} (solid) and {label_b} (dashed), seed by seed")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    main()
