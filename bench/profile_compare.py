#!/usr/bin/env python3
"""Several builds of tubelet, one interleaved run: `tubelet bench --profile --json` of each on the
same architectures, the order of the builds rotated every round so that the machine's other load
hits all of them alike.

Used for issue 20's "speed does not change" check (the tree before a restructuring against after)
and to measure a kernel change against the tree without it.

  git worktree add /tmp/before REV && make -C /tmp/before -j2 build/tubelet
  python3 bench/profile_compare.py --bin before=/tmp/before/build/tubelet --bin after=build/tubelet \
      --arch videomae-base timesformer-base vivit-base --rounds 3 --repeats 3 [--threads 2]

Prints a markdown table: per architecture, the median over rounds of each build's median forward
time, the ratio to the first build, and the per-kind profile of each (ms per forward). No Python
packages needed.
"""
import argparse
import json
import os
import statistics
import subprocess


def bench(binary, arch, threads, repeats):
    p = subprocess.run([binary, "bench", "--arch", arch, "--threads", str(threads), "--repeats",
                        str(repeats), "--warmup", "1", "--profile", "--json"],
                       check=True, capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stdout + "\n" + p.stderr


def profile_lines(text):
    """The `name   12.3 ms` lines that --profile prints before the JSON object."""
    prof = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "ms" and not line.startswith("per forward"):
            try:
                prof[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return prof


def fma_peak(threads):
    """The FP32 FMA peak of this CPU at `threads`, from build/fma_peak in this run (None if absent)."""
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "fma_peak")
    if not os.access(exe, os.X_OK):
        return None
    out = subprocess.run([exe, "--threads", str(threads), "--kernels", "fp32", "--json"],
                         capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["cpu"], j["kernels"]["fp32_fma"]["gflops"][str(threads)]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", required=True, metavar="NAME=PATH",
                    help="a tubelet binary and its name in the table (two or more; the first is the base)")
    ap.add_argument("--arch", nargs="+", default=["videomae-base", "timesformer-base", "vivit-base"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    if any(len(b) != 2 for b in bins) or len(bins) < 2:
        ap.error("give two or more --bin NAME=PATH")
    names = [n for n, _ in bins]
    res = {arch: {n: {"ms": [], "prof": []} for n in names} for arch in a.arch}
    for r in range(a.rounds):
        for arch in a.arch:
            order = bins[r % len(bins):] + bins[:r % len(bins)]
            for name, path in order:
                j, text = bench(path, arch, a.threads, a.repeats)
                res[arch][name]["ms"].append(j["ms_median"])
                res[arch][name]["prof"].append(profile_lines(text))
                print(f"round {r} {arch} {name}: {j['ms_median']:.1f} ms", flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    peak = fma_peak(a.threads)
    print(f"\nload average at the end: {load}")
    print(f"CPU {peak[0]}, FP32 FMA peak at {a.threads} threads {peak[1]:.0f} GFLOP/s (build/fma_peak, "
          f"this run)\n" if peak else "build/fma_peak not built: no peak measured "
          "(gcc -O2 -fopenmp -mavx512f -mfma -mavx512bf16 bench/fma_peak.c -o build/fma_peak)\n")
    base = names[0]
    print("| architecture | " + " | ".join(f"{n} ms" for n in names) + " | " +
          " | ".join(f"{n} / {base}" for n in names[1:]) + " |")
    print("|---|" + "---|" * (2 * len(names) - 1))
    for arch, d in res.items():
        med = {n: statistics.median(d[n]["ms"]) for n in names}
        print(f"| {arch} | " + " | ".join(f"{med[n]:.0f} ({', '.join(f'{x:.0f}' for x in d[n]['ms'])})"
                                           for n in names) + " | " +
              " | ".join(f"{med[n] / med[base]:.3f}" for n in names[1:]) + " |")
    print("\nper kind of work (ms per forward, median of rounds), " + " → ".join(names) + ":\n")
    for arch, d in res.items():
        kinds = list(d[base]["prof"][0].keys())
        cells = []
        for k in kinds:
            vals = [statistics.median(p.get(k, 0.0) for p in d[n]["prof"]) for n in names]
            cells.append(f"{k} " + " → ".join(f"{v:.0f}" for v in vals))
        print(f"- {arch}: " + "; ".join(cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
