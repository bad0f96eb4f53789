#!/usr/bin/env python3
"""Label every video in a folder with a tubelet model and write a CSV.

    python examples/python/classify_folder.py models/motion-vivit/examples \
        --model models/motion-vivit -o labels.csv

One row per video: path, top label, its score, the next labels, or the error for a video that
cannot be read (the others still run). A progress bar goes to stderr. Ctrl-C stops at the next
video and keeps the rows written so far.
"""
import argparse
import csv
import os
import sys
import time

import tubelet

VIDEO_EXT = {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".ts", ".gif"}


def progress(i, n, t0, name):
    w = 30
    done = int(w * i / n) if n else w
    rate = i / max(time.perf_counter() - t0, 1e-9)
    eta = (n - i) / rate if rate > 0 else 0
    sys.stderr.write(f"\r[{'#' * done}{'.' * (w - done)}] {i}/{n} {rate:.1f} videos/s "
                     f"eta {eta:.0f} s  {name[-30:]:<30}")
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
    t0 = time.perf_counter()
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["video", "label", "score"] + [f"label{k}" for k in range(2, a.top + 1)]
                     + ["error"])
        try:
            for i, p in enumerate(paths):
                progress(i, len(paths), t0, p)
                # one at a time, so the bar moves; m.classify(paths) would also overlap decoding
                r = m.classify([p], top=a.top)[0]
                if "error" in r:
                    n_err += 1
                    out.writerow([p, "", ""] + [""] * (a.top - 1) + [r["error"]])
                else:
                    t = r["top"]
                    out.writerow([p, t[0]["label"], f"{t[0]['score']:.6f}"]
                                 + [x["label"] for x in t[1:]] + [""] * (a.top - len(t)) + [""])
            progress(len(paths), len(paths), t0, "")
        except KeyboardInterrupt:
            sys.stderr.write("\ninterrupted: keeping the rows so far\n")
    os.replace(tmp, a.output)
    sys.stderr.write(f"\n{a.output}: {len(paths) - n_err} labelled, {n_err} failed\n")
    return 1 if n_err else 0


if __name__ == "__main__":
    sys.exit(main())
