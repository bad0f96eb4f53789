#!/usr/bin/env python3
"""Cost tables of the attention schemes at ViT-B size, measured with `tubelet bench`.

  (a) table:  the nine --arch variants (timesformer-base-{space,joint,divided,local-global,axial},
              vivit-base-m{1,2,3,4}) at their published input: parameters, GFLOP per clip,
              forward latency, GFLOP/s, activation memory and peak RSS (batch 1, 2 threads);
              with --train also one training step (forward + backward)
  (b) frames: TimeSformer joint vs divided space-time attention at 8, 16, 32, 64 frames of 224^2,
              on 1 and 2 threads (the threads table of issue 6)
  (c) res:    the same at 8 frames of 224^2, 336^2, 448^2 (2 threads)

Every point is one `tubelet bench --json` process (random weights at the config's shape; another
input shape resizes the position embeddings, and the FLOPs are counted for the shape timed), run
while holding /tmp/tubelet-bench.lock (flock(2), the lock `flock(1)` takes), so that only one
timing runs at a time on this shared machine. Beside each point: /proc/loadavg before and after,
and the cores other processes used while it ran ((machine busy time - our child's CPU time) /
wall time, from /proc/stat and wait4's rusage).

Latency is the median of the timed repeats after the warm-up runs; the repeats shrink with the
point's size (see repeats_for) because joint attention at 64 frames takes about a minute per
forward on 2 cores. Peak RSS is the bench process's getrusage maximum (weights included).

Results accumulate in bench/cost_tables.json (a point already there is not re-run unless --redo);
the markdown tables go between the markers of docs/cost-tables.md and the plot to
docs/cost-scaling.png.

  /work/main/.venv/bin/python bench/cost_tables.py                  # everything missing
  /work/main/.venv/bin/python bench/cost_tables.py --only frames --threads 2
  /work/main/.venv/bin/python bench/cost_tables.py --report         # tables and plot from the json
"""
import argparse
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/tubelet-bench.lock"
BEGIN, END = "<!-- cost-tables:begin -->", "<!-- cost-tables:end -->"

TIMESFORMER = ["space", "joint", "divided", "local-global", "axial"]
VIVIT = ["m1", "m2", "m3", "m4"]
TABLE_ARCHS = [f"timesformer-base-{s}" for s in TIMESFORMER] + [f"vivit-base-{m}" for m in VIVIT]
SWEEP_ARCHS = ["timesformer-base-joint", "timesformer-base-divided"]
FRAMES = [8, 16, 32, 64]
SIZES = [224, 336, 448]
PAPER_NAME = {
    "timesformer-base-space": "TimeSformer Space (S)",
    "timesformer-base-joint": "TimeSformer Joint Space-Time (ST)",
    "timesformer-base-divided": "TimeSformer Divided Space-Time (T+S)",
    "timesformer-base-local-global": "TimeSformer Sparse Local Global (L+G)",
    "timesformer-base-axial": "TimeSformer Axial (T+W+H)",
    "vivit-base-m1": "ViViT Model 1, spatio-temporal",
    "vivit-base-m2": "ViViT Model 2, factorised encoder",
    "vivit-base-m3": "ViViT Model 3, factorised self-attention",
    "vivit-base-m4": "ViViT Model 4, factorised dot-product",
}


# ---------------------------------------------------------------------------------------------
# machine


def machine_busy_s(niced=False):
    """CPU-seconds all cores spent busy since boot (/proc/stat): everything but idle, iowait and
    niced work, or (niced=True) the niced work alone. Niced processes (other helpers' long
    training runs) yield the cores to a timing, so they count apart."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = v[1] if niced else sum(v) - v[1] - v[3] - v[4]
    return busy / os.sysconf("SC_CLK_TCK")


def other_cores_now(seconds=2.0):
    """Cores busy over the next `seconds`, less this process's own CPU time."""
    b0, c0, w0 = machine_busy_s(), time.process_time(), time.time()
    time.sleep(seconds)
    return max(0.0, (machine_busy_s() - b0 - (time.process_time() - c0)) / (time.time() - w0))


def wait_idle(max_other, max_wait_s, log):
    """Waits (up to max_wait_s) until other processes use at most max_other cores."""
    t0, load = time.time(), other_cores_now()
    while load > max_other and time.time() - t0 < max_wait_s:
        load = other_cores_now(5.0)
    if time.time() - t0 > 3:
        log(f"  waited {time.time() - t0:.0f} s for the machine to go quiet (other cores {load:.2f})")
    return load


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def machine_info(binary):
    info = {"platform": platform.platform(), "cpus_online": os.cpu_count()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU family", "Model", "L2 cache", "L3 cache",
                             "Hypervisor vendor"):
                info[k.strip()] = v.strip()
            if k.strip() == "Flags":
                info["avx512"] = " ".join(f for f in v.split() if f.startswith("avx512"))
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        info["git"] = rev
        info["binary"] = os.path.relpath(binary, ROOT)
    except OSError as e:
        info["note"] = str(e)
    return info


# ---------------------------------------------------------------------------------------------
# measuring


def tokens(arch, frames, size):
    """Patch tokens of a clip (16x16 patches; ViViT's tubelets are 2 frames deep)."""
    return frames // (2 if arch.startswith("vivit") else 1) * (size // 16) ** 2


def repeats_for(arch, frames, size, threads):
    """(warm-up, repeats): fewer for the big points. A forward of more than ~6000 tokens takes
    tens of seconds (minutes on 1 thread), where the first run's page faults and kernel set-up
    are well below 1 %."""
    n = tokens(arch, frames, size)
    if n > 6400:
        return 0, 1 if threads == 1 else 2
    if n > 1600:
        return 1, 2
    return 1, 3


def key(arch, mode, threads, frames, size):
    return f"{arch}|{mode}|t{threads}|{frames}x{size}"


def run_point(binary, arch, mode, threads, frames, size, warmup, repeats, log):
    cmd = [binary, "bench", "--arch", arch, "--threads", str(threads), "--frames", str(frames),
           "--size", str(size), "--warmup", str(warmup), "--repeats", str(repeats), "--json"]
    if mode != "inference":
        cmd.insert(2, "--train")
    with open(LOCK, "a") as lk:
        t_wait = time.time()
        fcntl.flock(lk, fcntl.LOCK_EX)  # the lock flock(1) takes: one timing at a time
        waited = time.time() - t_wait
        la0, b0, n0, w0 = loadavg(), machine_busy_s(), machine_busy_s(True), time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate()
        wall = time.time() - w0
        busy = machine_busy_s() - b0
        niced = machine_busy_s(True) - n0
        la1 = loadavg()
    row = {"key": key(arch, mode, threads, frames, size), "arch": arch, "mode": mode,
           "threads": threads, "frames": frames, "size": size, "warmup": warmup,
           "repeats": repeats, "cmd": " ".join(os.path.relpath(c, ROOT) if c == binary else c
                                                for c in cmd),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "lock_wait_s": round(waited, 1), "wall_s": round(wall, 1),
           "loadavg_before": la0, "loadavg_after": la1, "rc": p.returncode}
    row["_busy_s"] = busy
    row["niced_cores"] = round(niced / max(wall, 1e-3), 2)
    if p.returncode != 0:
        row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
        log(f"  FAILED: {row['error']}")
        return row
    row.update(json.loads(out))
    return row


def measure(binary, points, data, args, log):
    rows = {r["key"]: r for r in data["points"]}
    todo = [p for p in points if args.redo or key(*p) not in rows or "ms_median" not in rows[key(*p)]
            or rows[key(*p)]["other_cores"] + rows[key(*p)].get("niced_cores", 1) > args.redo_loaded]
    log(f"{len(todo)} points to measure ({len(points) - len(todo)} already in the json)")
    for i, (arch, mode, threads, frames, size) in enumerate(todo):
        warmup, repeats = repeats_for(arch, frames, size, threads)
        if args.repeats:
            warmup, repeats = args.warmup, args.repeats
        log(f"[{i + 1}/{len(todo)}] {arch} {mode} {frames}x{size}^2 threads {threads} "
            f"(warm-up {warmup}, repeats {repeats}), load {loadavg()[0]:.2f}")
        # small points are redone (up to --tries times) while others disturbed them; the least
        # disturbed run is kept
        tries = args.tries if tokens(arch, frames, size) <= 3200 else 1
        row = None
        for attempt in range(tries):
            wait_idle(args.max_other, args.max_wait, log)
            ru0 = os.times()  # our child's CPU time: the growth of RUSAGE_CHILDREN
            r = run_point(binary, arch, mode, threads, frames, size, warmup, repeats, log)
            ru1 = os.times()
            cpu = (ru1.children_user - ru0.children_user) + (ru1.children_system - ru0.children_system)
            busy = r.pop("_busy_s")
            r["child_cpu_s"] = round(cpu, 1)
            r["other_cores"] = round(max(0.0, (busy - cpu) / max(r["wall_s"], 1e-3)), 2)
            if row is None or r.get("other_cores", 9) < row.get("other_cores", 9):
                row = r
            if "ms_median" not in r or r["other_cores"] <= args.max_other or attempt == tries - 1:
                break
            log(f"  {r['ms_median']:.0f} ms with {r['other_cores']:.2f} other cores busy: again")
        if "ms_median" in row:
            log(f"  {row['ms_median']:.0f} ms, {row['gflop_per_clip']:.1f} GFLOP, "
                f"{row['gflops_per_s']:.1f} GFLOP/s, peak RSS {row['peak_rss_mb']:.0f} MB, "
                f"other cores {row['other_cores']:.2f} (+ {row['niced_cores']:.2f} niced)")
        rows[row["key"]] = row
        data["points"] = list(rows.values())
        save(data, args.json)


def info(binary, arch):
    out = subprocess.run([binary, "info", "--arch", arch, "--json", "--threads", "1"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def fma_peak(threads):
    """The fp32 FMA peak from bench/fma_peak.c (built to build/fma_peak if missing)."""
    exe = os.path.join(ROOT, "build", "fma_peak")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O2", "-fopenmp", "-mavx512f", "-mfma", "-mavx512bf16",
                        os.path.join(ROOT, "bench", "fma_peak.c"), "-o", exe], check=True)
    with open(LOCK, "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        la = loadavg()
        out = subprocess.run([exe, "--json", "--kernels", "fp32", "--threads", str(threads),
                              "--reps", "11"], capture_output=True, text=True, check=True).stdout
    g = json.loads(out)["kernels"]["fp32_fma"]["gflops"][str(threads)]
    return {"threads": threads, "gflops_median": g["median"], "gflops_best": g["best"],
            "loadavg_before": la}


def save(data, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# report


def fmt_ms(ms):
    return f"{ms / 1e3:.2f} s" if ms >= 10e3 else f"{ms:.0f} ms"


def load_cell(r):
    """Other processes' cores while the point ran: normal + niced."""
    return f"{r['other_cores']:.1f}+{r.get('niced_cores', 0):.1f}"


def get(rows, arch, mode, threads, frames, size):
    r = rows.get(key(arch, mode, threads, frames, size))
    return r if r and "ms_median" in r else None


def table_a(data, rows):
    peak2 = None  # fma_peak under the others' load is too low to divide by (it is in the json)
    train = any(r.get("mode") == "train" and "ms_median" in r for r in rows.values())
    head = ("| model | input | tokens | params | GFLOP/clip | forward, 2 threads | GFLOP/s"
            + (" (% of FMA peak)" if peak2 else "") + " | activations | peak RSS |"
            + (" training step (fwd + bwd) | train peak RSS |" if train else "") + " other load |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for arch in TABLE_ARCHS:
        inf = data["info"].get(arch)
        if not inf:
            continue
        T, S = inf["input_shape"][1], inf["input_shape"][3]
        r = get(rows, arch, "inference", 2, T, S)
        tr = get(rows, arch, "train", 2, T, S)
        cells = [f"{PAPER_NAME[arch]} (`{arch}`)", f"{T}×{S}²", f"{inf['tokens']}",
                 f"{inf['params'] / 1e6:.1f} M", f"{inf['gflop_per_clip']:.1f}"]
        if r:
            g = f"{r['gflops_per_s']:.0f}" + (f" ({100 * r['gflops_per_s'] / peak2:.0f} %)" if peak2 else "")
            cells += [fmt_ms(r["ms_median"]), g, f"{r['activation_mb']:.0f} MB",
                      f"{r['peak_rss_mb']:.0f} MB"]
        else:
            cells += ["—"] * 4
        if train:
            cells += [fmt_ms(tr["ms_median"]), f"{tr['peak_rss_mb']:.0f} MB"] if tr else ["—", "—"]
        loads = [x for x in (r, tr) if x]
        cells.append(", ".join(load_cell(x) for x in loads) if loads else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_sweep(rows, var, values, fixed, threads_list):
    """One row per value of `var` (frames or size): GFLOP, latency per thread count, memory."""
    th = "".join(f" {a} {t} thr |" for a in ("joint", "divided") for t in threads_list)
    head = (f"| {'frames' if var == 'frames' else 'size'} | tokens | GFLOP joint | GFLOP divided |"
            + th + " joint / divided (2 thr) |"
            + (" 2-thread speed-up joint, divided |" if len(threads_list) > 1 else "")
            + " activations joint, divided | peak RSS joint, divided | other load |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for v in values:
        T, S = (v, fixed) if var == "frames" else (fixed, v)
        pts = {(a, t): get(rows, f"timesformer-base-{a}", "inference", t, T, S)
               for a in ("joint", "divided") for t in threads_list}
        if not any(pts.values()):
            continue
        any_of = lambda a: next((p for (aa, _), p in pts.items() if aa == a and p), None)
        j, d = any_of("joint"), any_of("divided")
        cells = [f"{T}×{S}²" if var == "frames" else f"{S}² (×{T})", f"{T * (S // 16) ** 2 + 1}",
                 f"{j['gflop_per_clip']:.0f}" if j else "—", f"{d['gflop_per_clip']:.0f}" if d else "—"]
        cells += [fmt_ms(pts[a, t]["ms_median"]) if pts[a, t] else "—"
                  for a in ("joint", "divided") for t in threads_list]
        j2, d2 = pts.get(("joint", 2)), pts.get(("divided", 2))
        cells.append(f"{j2['ms_median'] / d2['ms_median']:.2f}×" if j2 and d2 else "—")
        if len(threads_list) > 1:
            sp = []
            for a in ("joint", "divided"):
                p1, p2 = pts.get((a, 1)), pts.get((a, 2))
                sp.append(f"{p1['ms_median'] / p2['ms_median']:.2f}×" if p1 and p2 else "—")
            cells.append(", ".join(sp))
        cells.append(", ".join(f"{p['activation_mb']:.0f}" if p else "—" for p in (j, d)) + " MB")
        cells.append(", ".join(f"{p['peak_rss_mb']:.0f}" if p else "—" for p in (j, d)) + " MB")
        cells.append(", ".join(load_cell(p) for p in pts.values() if p))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(data, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    fig, ax = plt.subplots(3, 2, figsize=(10, 11), sharex="col")
    style = {"joint": dict(color="C3", marker="o"), "divided": dict(color="C0", marker="s")}
    for col, (var, values, fixed) in enumerate((("frames", FRAMES, 224), ("size", SIZES, 8))):
        for a in ("joint", "divided"):
            for t, ls in ((2, "-"), (1, "--")):
                pts = [(v, get(rows, f"timesformer-base-{a}", "inference", t,
                               *((v, fixed) if var == "frames" else (fixed, v)))) for v in values]
                pts = [(v, p) for v, p in pts if p]
                if not pts:
                    continue
                xs = [v for v, _ in pts]
                ax[0, col].plot(xs, [p["ms_median"] / 1e3 for _, p in pts], ls=ls, **style[a],
                                mfc="white" if t == 1 else style[a]["color"],
                                label=f"{a}, {t} thread{'s' if t > 1 else ''}")
                if t == 2:
                    ax[1, col].plot(xs, [p["gflop_per_clip"] / 1e3 for _, p in pts], **style[a],
                                    label=f"{a} space-time")
                    ax[2, col].plot(xs, [p["activation_mb"] for _, p in pts], **style[a],
                                    label=f"{a}: activations")
                    ax[2, col].plot(xs, [p["peak_rss_mb"] for _, p in pts], ls=":", **style[a],
                                    label=f"{a}: peak RSS")
        what = "frames (224² crop)" if var == "frames" else "crop size, pixels (8 frames)"
        ax[2, col].set_xlabel(what)
        for r in range(3):
            ax[r, col].set_yscale("log")
            ax[r, col].set_xscale("log", base=2)
            ax[r, col].set_xticks(values, [str(v) for v in values])
            ax[r, col].set_xlim(values[0] / 1.15, values[-1] * 1.15)
            ax[r, col].yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
            ax[r, col].yaxis.set_minor_locator(NullLocator())
            ax[r, col].xaxis.set_minor_locator(NullLocator())
            ax[r, col].yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            ax[r, col].grid(True, which="major", alpha=0.3)
        ax[0, col].legend(fontsize=8)
        ax[1, col].legend(fontsize=8)
        ax[2, col].legend(fontsize=8)
    ax[0, 0].set_ylabel("forward latency, s (measured)")
    ax[1, 0].set_ylabel("TFLOP per clip (counted, 2 per multiply-add)")
    ax[2, 0].set_ylabel("memory, MB (measured)")
    ax[0, 0].set_title("TimeSformer-B: cost vs number of frames")
    ax[0, 1].set_title("TimeSformer-B: cost vs resolution")
    m = data["machine"]
    fig.suptitle(f"joint vs divided space-time attention, batch 1, fp32, tubelet on "
                 f"{m.get('Model name', '?')} ({m.get('cpus_online')} cores, shared: other load in "
                 f"docs/cost-tables.md)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(data, md_path, png_path):
    rows = {r["key"]: r for r in data["points"]}
    plot(data, rows, png_path)
    dates = sorted(r["date"] for r in rows.values() if "ms_median" in r)
    text = "\n".join([
        "<!-- written by bench/cost_tables.py from bench/cost_tables.json; edit the script, "
        "not this section -->",
        f"Measured {dates[0][:16].replace('T', ' ')} – {dates[-1][:16].replace('T', ' ')} UTC "
        f"at {data['machine'].get('git', '?')}, on {data['machine'].get('Model name', '?')} "
        f"({data['machine'].get('cpus_online')} cores).",
        "",
        "**(a) ViT-B variants at their published input** (batch 1, fp32, random weights, "
        "2 threads; latency = median of the timed forwards):",
        "",
        table_a(data, rows),
        "",
        "**(b) TimeSformer-B, joint vs divided space-time attention, against the number of "
        "frames** (224², batch 1):",
        "",
        table_sweep(rows, "frames", FRAMES, 224, [1, 2]),
        "",
        "**(c) the same against the crop size** (8 frames, batch 1):",
        "",
        table_sweep(rows, "size", SIZES, 8,
                    [1, 2] if any(r.get("threads") == 1 and r.get("frames") == 8 and
                                  r.get("size", 224) > 224 for r in rows.values()) else [2]),
        "",
        "![cost against frames and resolution](cost-scaling.png)",
    ])
    with open(md_path) as f:
        doc = f.read()
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN) + len(BEGIN)] + "\n" + text + "\n" + doc[doc.index(END):]
    else:
        doc += f"\n{BEGIN}\n{text}\n{END}\n"
    with open(md_path, "w") as f:
        f.write(doc)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "cost_tables.json"))
    ap.add_argument("--md", default=os.path.join(ROOT, "docs", "cost-tables.md"))
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "cost-scaling.png"))
    ap.add_argument("--only", nargs="*", choices=["table", "train", "frames", "res"],
                    default=["table", "frames", "res"])
    ap.add_argument("--threads", nargs="*", type=int, default=[2, 1],
                    help="thread counts of the frames sweep (the table is on 2 threads)")
    ap.add_argument("--res-threads", nargs="*", type=int, default=[2])
    ap.add_argument("--max-frames", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=0, help="override repeats_for")
    ap.add_argument("--warmup", type=int, default=1, help="with --repeats")
    ap.add_argument("--redo", action="store_true", help="re-measure points already in the json")
    ap.add_argument("--redo-loaded", type=float, default=9.0,
                    help="re-measure points during which others (niced too) used more than this "
                    "many cores")
    ap.add_argument("--max-other", type=float, default=0.3,
                    help="wait for others to use at most this many cores before each point")
    ap.add_argument("--max-wait", type=float, default=120, help="seconds to wait for that")
    ap.add_argument("--tries", type=int, default=1, help="runs of a small disturbed point")
    ap.add_argument("--report", action="store_true", help="only write the tables and the plot")
    args = ap.parse_args()
    log = lambda s: print(s, file=sys.stderr, flush=True)
    binary = os.path.abspath(args.bin)

    data = {"points": [], "info": {}, "fma_peak": {}}
    if os.path.exists(args.json):
        with open(args.json) as f:
            data = json.load(f)
    if not args.report:
        data["machine"] = machine_info(binary)
        for arch in TABLE_ARCHS:
            data["info"][arch] = info(binary, arch)
        for t in (1, 2):
            if str(t) not in data["fma_peak"] or args.redo:
                data["fma_peak"][str(t)] = fma_peak(t)
        points = []
        for part in args.only:
            if part in ("table", "train"):
                mode = "inference" if part == "table" else "train"
                for arch in TABLE_ARCHS:
                    shp = data["info"][arch]["input_shape"]
                    points.append((arch, mode, 2, shp[1], shp[3]))
            elif part == "frames":
                for t in args.threads:
                    for T in FRAMES:
                        if T <= args.max_frames:
                            points += [(a, "inference", t, T, 224) for a in SWEEP_ARCHS]
            elif part == "res":
                for t in args.res_threads:
                    for S in SIZES:
                        points += [(a, "inference", t, 8, S) for a in SWEEP_ARCHS]
        measure(binary, points, data, args, log)
        save(data, args.json)
    report(data, args.md, args.png)
    log(f"wrote {os.path.relpath(args.json, ROOT)}, {os.path.relpath(args.md, ROOT)}, "
        f"{os.path.relpath(args.png, ROOT)}")


if __name__ == "__main__":
    main()
