#!/usr/bin/env python3
"""What the Python package costs on top of the C engine (issue 12).

  1. per-call overhead of m(x) against `tubelet bench` (the same model, input shape, threads and
     weight layout): a tiny model (tests/fixtures/videomae_mean, 1 thread, where the overhead
     shows; target <= 50 us) and VideoMAE-B (--arch videomae-base, --threads; target <= 2 %).
     Rounds alternate CLI and Python so that the other load of the shared machine hits both.
  2. m.classify on a list of clips against transformers' pipeline("video-classification") with the
     same model directory: wall time (warm, and from process start) and whether the answers agree
     (top-5 labels in order, scores within 1e-4). Needs torch, transformers, av and torchcodec;
     skipped otherwise.
  3. peak RSS (ru_maxrss of a fresh child process) of each.

Inputs for part 2 are made once under bench/out/ (git-ignored): a random-weight VideoMAE-B
(transformers save_pretrained, 400 labels, the published 224x224x16 shape) with VideoMAE's
preprocessor_config.json, and 4 clips (ffmpeg testsrc2, 640x360, 30 fps, 4 s, H.264).

Usage (from the repository root, after `make` and `pip install .`):
  /work/venv/bin/python bench/python_overhead.py [--rounds 3] [--threads 1] [--vit-repeats 3]
      [--no-pipeline] [--json FILE]
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "tubelet")
OUT = os.path.join(ROOT, "bench", "out")
TINY = os.path.join(ROOT, "tests", "fixtures", "videomae_mean")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def child(mode, *args, timeout=1800):
    """Runs this script as `--_child mode args`; returns its JSON line and peak RSS (MB)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_child", mode, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    if status:
        raise SystemExit(f"child {mode} failed:\n{err}")
    r = json.loads(out.strip().splitlines()[-1])
    r["rss_mb"] = ru.ru_maxrss / 1024
    r["wall_s"] = time.perf_counter() - t
    return r


def cli_bench(args):
    r = subprocess.run([CLI, "bench", *args, "--json"], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    return json.loads(r.stdout)


# ------------------------------------------------------------------ children

def child_forward(model, threads, repeats, warmup):
    """Median of m(x) calls, each timed alone, and of the binding's own call (no checks)."""
    import numpy as np

    import tubelet
    m = (tubelet.from_arch(model, threads=threads, inference=True) if not os.path.isdir(model)
         else tubelet.load(model, threads=threads, inference=True))
    c = m.config
    x = np.random.default_rng(0).standard_normal(
        (1, c["num_frames"], c["num_channels"], c["image_height"], c["image_width"])
    ).astype(np.float32)
    for _ in range(warmup):
        m(x)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        m(x)
        ts.append(time.perf_counter_ns() - t)
    s, sh = m._state(x)
    logits = np.empty(sh["logits_shape"], np.float32)
    tb = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        s.forward(x, logits, None)
        tb.append(time.perf_counter_ns() - t)
    return {"ms_median": statistics.median(ts) / 1e6, "ms_min": min(ts) / 1e6,
            "binding_ms_median": statistics.median(tb) / 1e6}


def child_rss(model, threads):
    import numpy as np

    import tubelet
    m = tubelet.from_arch(model, threads=threads)
    c = m.config
    m(np.zeros((1, c["num_frames"], 3, c["image_height"], c["image_width"]), np.float32))
    return {"ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_classify(model_dir, threads, *clips):
    t0 = time.perf_counter()
    import tubelet
    m = tubelet.load(model_dir, threads=threads)
    first = m.classify(list(clips), top=5)
    cold = time.perf_counter() - t0
    t = time.perf_counter()
    again = m.classify(list(clips), top=5)
    warm = time.perf_counter() - t
    assert again == first
    return {"cold_s": cold, "warm_s": warm,
            "top": [[(d["label"], d["score"]) for d in r["top"]] for r in first]}


def child_pipeline(model_dir, threads, *clips):
    t0 = time.perf_counter()
    import torch
    torch.set_num_threads(int(threads))
    from transformers import pipeline
    p = pipeline("video-classification", model=model_dir)
    first = p(list(clips), top_k=5)
    cold = time.perf_counter() - t0
    t = time.perf_counter()
    p(list(clips), top_k=5)
    warm = time.perf_counter() - t
    return {"cold_s": cold, "warm_s": warm,
            "top": [[(d["label"], d["score"]) for d in r] for r in first]}


# ------------------------------------------------------------------ inputs of part 2

def make_inputs():
    os.makedirs(OUT, exist_ok=True)
    mdir = os.path.join(OUT, "videomae-base-random")
    if not os.path.exists(os.path.join(mdir, "model.safetensors")):
        import torch
        from transformers import VideoMAEConfig, VideoMAEForVideoClassification
        torch.manual_seed(0)
        cfg = VideoMAEConfig(num_labels=400, use_mean_pooling=True,
                             id2label={i: f"class {i}" for i in range(400)},
                             label2id={f"class {i}": i for i in range(400)})
        VideoMAEForVideoClassification(cfg).save_pretrained(mdir)
        # MCG-NJU/videomae-base-finetuned-kinetics's preprocessing
        json.dump({"crop_size": {"height": 224, "width": 224}, "do_center_crop": True,
                   "do_normalize": True, "do_rescale": True, "do_resize": True,
                   "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
                   "image_processor_type": "VideoMAEImageProcessor", "resample": 2,
                   "rescale_factor": 1 / 255, "size": {"shortest_edge": 224}},
                  open(os.path.join(mdir, "preprocessor_config.json"), "w"), indent=2)
    clips = []
    for i in range(4):
        p = os.path.join(OUT, f"clip-360p-4s-{i}.mp4")
        if not os.path.exists(p):
            subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                            f"testsrc2=size=640x360:rate=30:duration=4,hue=h={90 * i}",
                            "-c:v", "libx264", "-pix_fmt", "yuv420p", p], check=True)
        clips.append(p)
    return mdir, clips


# ------------------------------------------------------------------ parts

def part_overhead(rounds, label, model, threads, repeats, warmup, cli_args):
    rows = []
    for r in range(rounds):
        la = loadavg()
        c = cli_bench([*cli_args, "--threads", str(threads), "--repeats", str(repeats),
                       "--warmup", str(warmup)])
        p = child("forward", model, str(threads), str(repeats), str(warmup))
        rows.append({"round": r, "cli_ms": c["ms_median"], "py_ms": p["ms_median"],
                     "binding_ms": p["binding_ms_median"], "load_before": la,
                     "load_after": loadavg(), "cli_packed": c.get("packed")})
        print(f"  {label} round {r}: bench {c['ms_median']:.4f} ms, m(x) {p['ms_median']:.4f} ms, "
              f"binding {p['binding_ms_median']:.4f} ms (load {la:.2f})", flush=True)
    cli = statistics.median(r["cli_ms"] for r in rows)
    py = statistics.median(r["py_ms"] for r in rows)
    b = statistics.median(r["binding_ms"] for r in rows)
    return {"label": label, "threads": threads, "repeats": repeats, "rounds": rows,
            "cli_ms": cli, "py_ms": py, "binding_ms": b, "overhead_us": (py - cli) * 1e3,
            "overhead_pct": 100 * (py - cli) / cli, "wrapper_us": (py - b) * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--_child")
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    # 1 thread by default: on a shared 2-core machine, OpenMP teams of 2 stall whenever another
    # process holds a core (20 s instead of 0.9 s per VideoMAE-B forward was seen)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vit-repeats", type=int, default=3)
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a._child:
        fn = {"forward": lambda m, t, r, w: child_forward(m, int(t), int(r), int(w)),
              "rss": lambda m, t: child_rss(m, int(t)),
              "classify": lambda d, t, *c: child_classify(d, int(t), *c),
              "pipeline": child_pipeline}[a._child]
        print(json.dumps(fn(*a.rest)))
        return
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
           "cpu": cpu_model(), "cores": os.cpu_count()}
    print(f"{res['date']} {res['cpu']}, {res['cores']} cores", flush=True)
    res["tiny"] = part_overhead(a.rounds, "tiny (videomae_mean fixture)", TINY, 1, 2000, 200,
                                ["--model", TINY])
    res["vit_b"] = part_overhead(a.rounds, "VideoMAE-B", "videomae-base", a.threads, a.vit_repeats, 1,
                                 ["--arch", "videomae-base"])
    rss = child("rss", "videomae-base", str(a.threads))
    cli = cli_bench(["--arch", "videomae-base", "--threads", str(a.threads), "--repeats", "1",
                     "--unpacked"])
    res["rss"] = {"python_mb": rss["ru_maxrss_mb"], "cli_mb": cli["peak_rss_mb"]}
    print(f"  peak RSS VideoMAE-B forward: python {rss['ru_maxrss_mb']:.0f} MB, "
          f"tubelet bench {cli['peak_rss_mb']:.0f} MB", flush=True)
    if not a.no_pipeline:
        try:
            import av  # noqa: F401
            import torchcodec  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            res["pipeline"] = {"skipped": str(e)}
        else:
            mdir, clips = make_inputs()
            t = child("classify", mdir, str(a.threads), *clips)
            h = child("pipeline", mdir, str(a.threads), *clips)
            agree = all([lt for lt, _ in x] == [lh for lh, _ in y] and
                        all(abs(st - sh) <= 1e-4 for (_, st), (_, sh) in zip(x, y))
                        for x, y in zip(t["top"], h["top"]))
            worst = max(abs(st - sh) for x, y in zip(t["top"], h["top"])
                        for (_, st), (_, sh) in zip(x, y))
            res["pipeline"] = {"clips": len(clips), "tubelet": t, "hf": h, "agree": agree,
                               "max_score_diff": worst}
            print(f"  classify {len(clips)} clips: tubelet warm {t['warm_s']:.2f} s cold "
                  f"{t['cold_s']:.2f} s ({t['rss_mb']:.0f} MB); pipeline warm {h['warm_s']:.2f} s "
                  f"cold {h['cold_s']:.2f} s ({h['rss_mb']:.0f} MB); same answers: {agree} "
                  f"(max score diff {worst:.1e})", flush=True)
    peak = os.path.join(ROOT, "build", "fma_peak")   # the CPU's peak, measured in this run
    if os.access(peak, os.X_OK):
        j = json.loads(subprocess.run([peak, "--threads", str(a.threads), "--kernels", "fp32", "--json"],
                                      capture_output=True, text=True).stdout)
        res["fma_peak_gflops"] = j["kernels"]["fp32_fma"]["gflops"][str(a.threads)]["median"]
        print(f"  FP32 FMA peak at {a.threads} threads: {res['fma_peak_gflops']:.0f} GFLOP/s "
              f"(build/fma_peak)", flush=True)
    res["load_end"] = loadavg()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    for k in ("tiny", "vit_b"):
        r = res[k]
        print(f"{r['label']}: m(x) {r['py_ms']:.4f} ms vs tubelet bench {r['cli_ms']:.4f} ms: "
              f"{r['overhead_us']:+.1f} us ({r['overhead_pct']:+.2f} %); Python wrapper over the "
              f"binding {r['wrapper_us']:.1f} us")


if __name__ == "__main__":
    main()
