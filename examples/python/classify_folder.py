#!/usr/bin/env python3
"""Label every video in a folder with a tubelet model and write a CSV.

    python examples/python/classify_folder.py models/motion-vivit/examples \
        --model models/motion-vivit -o labels.csv

One row per video: path, the top labels each with its score (label, score, label2, score2, ...),
or the error for a video that cannot be read (the others still run). Progress goes to stderr: a
bar on a terminal, plain lines into a pipe or file (the CLI's rule, README "Commands"). Ctrl-C stops at the next
video and keeps the rows written so far.
"""
import argparse
import csv
import os
import sys
import time

import tubelet

VIDEO_EXT = {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".ts", ".gif"}


def _short(name, width=30):
    """name in at most width characters, cut at a path separator (its file name whole, with as
    many of its directories as fit): a cut in the middle of a word reads as another name."""
    if len(name) <= width:
        return name
    parts = name.split(os.sep)
    out = parts[-1]
    for d in reversed(parts[:-1]):
        if len(d) + 1 + len(out) + 4 > width:
            break
        out = d + os.sep + out
    return out if out == name else "..." + os.sep + out


class Progress:
    """The CLI's rule for progress on stderr (README, "Commands"): on a terminal one line redrawn
    in place; into a pipe or file plain lines, one each tenth of the work and one at its end."""

    def __init__(self, n):
        self.n, self.t0, self.tty = n, time.perf_counter(), sys.stderr.isatty()

    def show(self, i, name=""):
        n = self.n
        if not self.tty and 0 < i < n and 10 * i // n == 10 * (i - 1) // n:
            return
        w = 30
        done = w * i // n if n else w
        rate = i / max(time.perf_counter() - self.t0, 1e-9)
        eta = (n - i) / rate if rate > 0 else 0
        text = (f"[{'#' * done}{'.' * (w - done)}] {i}/{n} {rate:.1f} videos/s "
                f"eta {eta:.0f} s  {_short(name)}")
        if self.tty:
            sys.stderr.write("\r" + text + "\033[K" + ("\n" if i >= n else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("-o", "--output", default="labels.csv")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--recursive", action="store_true")
    a = ap.parse_args()

    if not os.path.isdir(a.folder):
        sys.exit(f"error: {a.folder}: " + ("not a directory" if os.path.exists(a.folder)
                                           else "no such directory"))
    paths = []
    for root, dirs, files in os.walk(a.folder):
        paths += [os.path.join(root, f) for f in sorted(files)
                  if os.path.splitext(f)[1].lower() in VIDEO_EXT]
        if not a.recursive:
            break
    if not paths:
        sys.exit(f"error: {a.folder}: no video files")
    try:
        m = tubelet.load(a.model, threads=a.threads)
    except tubelet.Error as e:
        sys.exit(f"error: {e}")

    tmp = a.output + ".part"  # renamed into place at the end: no half-written CSV
    n_err = 0
    bar = Progress(len(paths))
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        # each label with its score: label, score, label2, score2, ...
        out.writerow(["video", "label", "score"]
                     + [c for k in range(2, a.top + 1) for c in (f"label{k}", f"score{k}")]
                     + ["error"])
        try:
            for i, p in enumerate(paths):
                bar.show(i, p)
                # one at a time, so the bar moves; m.classify(paths) would also overlap decoding
                r = m.classify([p], top=a.top)[0]
                cells = [""] * (2 * a.top)
                if "error" in r:
                    n_err += 1
                    out.writerow([p] + cells + [r["error"]])
                else:
                    for k, x in enumerate(r["top"][:a.top]):
                        cells[2 * k:2 * k + 2] = [x["label"], f"{x['score']:.6f}"]
                    out.writerow([p] + cells + [""])
            bar.show(len(paths))
        except KeyboardInterrupt:
            sys.stderr.write("\ninterrupted: keeping the rows so far\n")
    os.replace(tmp, a.output)
    sys.stderr.write(f"{a.output}: {len(paths) - n_err} labelled, {n_err} failed\n")
    return 1 if n_err else 0


if __name__ == "__main__":
    sys.exit(main())
