"""The serve benchmark of issue 29 (docs/serve.md): `tubelet serve` on an ephemeral port, driven
by threads of Python's http.client posting the example clips as raw bodies (keep-alive, one
connection per thread).

Measures, in one run, with the CPU named and its fp32 peak (build/fma_peak) measured first:
- the shipped model at concurrency 1, 4 and 16: clips/s, p50/p99 latency and the mean batch the
  executor formed (from /metrics), with --max-batch 1 against dynamic batching (serve's default
  --max-batch);
- `tubelet classify` over the same files (clips/s; its model load taken out by timing one file);
- VideoMAE-B (random weights, transformers' VideoMAEForVideoClassification at its default
  config, written to a temporary directory) at concurrency 1 and 4;
- the model's own batch scaling (`tubelet bench --batch 1 2 4 8`), which bounds what dynamic
  batching can gain;
- the --threads/--workers split: serve's default (model threads: every core; 2 decode workers)
  against a few others, at the highest concurrency.
Prints markdown tables on stdout; progress on stderr. Take timings for publication on a quiet
machine only.

usage: /work/venv/bin/python bench/serve_bench.py [--requests 200] [--concurrency 1 4 16]
           [--videomae-requests 40] [--no-videomae] [--split 0:2,0:1,0:4,1:1] [--tubelet PATH]
           [--model DIR]
       a quick check of the script:  ... --requests 10 --videomae-requests 4 --repeats 1
"""
import argparse
import glob
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def fma_peak(threads):
    exe = os.path.join(ROOT, "build", "fma_peak")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O2", "-fopenmp", "-mavx512f", "-mfma", "-mavx512bf16",
                        os.path.join(ROOT, "bench", "fma_peak.c"), "-o", exe], check=True)
    r = subprocess.run([exe, "--threads", str(threads), "--kernels", "fp32", "--json"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


class Server:
    """`tubelet serve` on port 0 (the port it prints), stopped with SIGTERM."""

    def __init__(self, tubelet, model, args):
        self.p = subprocess.Popen([tubelet, "serve", "--model", model, "--port", "0", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        deadline = time.time() + 300
        for line in self.p.stdout:
            m = re.search(r"listening on http://[^:]+:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
            if line.strip() == "ready" or time.time() > deadline:
                break
        if not self.port:
            self.stop()
            raise RuntimeError(f"tubelet serve {' '.join(args)} did not start")
        threading.Thread(target=self.p.stdout.read, daemon=True).start()  # drain its output

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        return r.status, body

    def batch_stats(self):
        _, text = self.get("/metrics")
        val = {k: float(v) for k, v in re.findall(r"^(tubelet_batch_size_(?:sum|count)) (\S+)$",
                                                    text, re.M)}
        return val.get("tubelet_batch_size_sum", 0), val.get("tubelet_batch_size_count", 0)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def load_run(server, bodies, n, concurrency):
    """n POST /v1/classify at the given concurrency: (clips/s, p50 s, p99 s, errors)."""
    lat, errors, lock = [], [0], threading.Lock()
    counter = iter(range(n))

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            t = time.perf_counter()
            try:
                c.request("POST", "/v1/classify", bodies[i % len(bodies)],
                          {"Content-Type": "video/mp4"})
                r = c.getresponse()
                r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
            with lock:
                if ok:
                    lat.append(time.perf_counter() - t)
                else:
                    errors[0] += 1
        c.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    pct = (lambda q: lat[min(len(lat) - 1, int(q * (len(lat) - 1) + 0.5))] if lat else float("nan"))
    return len(lat) / wall, pct(0.5), pct(0.99), errors[0]


def serve_rows(tubelet, model, args, bodies, n, concurrencies, label):
    """One server, each concurrency in turn (after a warm-up): a table row each."""
    log(f"serve {label}: {' '.join(args) or '(defaults)'}")
    s = Server(tubelet, model, args)
    rows = []
    try:
        load_run(s, bodies, 2 * min(concurrencies), min(concurrencies))  # warm-up
        for c in concurrencies:
            b0 = s.batch_stats()
            rate, p50, p99, err = load_run(s, bodies, n, c)
            b1 = s.batch_stats()
            mean_batch = (b1[0] - b0[0]) / (b1[1] - b0[1]) if b1[1] > b0[1] else float("nan")
            rows.append((label, c, rate, p50 * 1000, p99 * 1000, mean_batch, err))
            log(f"  concurrency {c}: {rate:.1f} clips/s, p50 {p50 * 1000:.1f} ms, "
                f"p99 {p99 * 1000:.1f} ms, mean batch {mean_batch:.2f}, errors {err}")
    finally:
        s.stop()
    return rows


def classify_rate(tubelet, model, files, n):
    """`tubelet classify` over n files (the examples repeated): clips/s without its model load
    (the time of one file taken out)."""
    many = [files[i % len(files)] for i in range(n)]
    def timed(paths):
        t = time.perf_counter()
        subprocess.run([tubelet, "classify", "--model", model, *paths], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t
    one, full = timed(many[:1]), timed(many)
    return (n - 1) / (full - one) if full > one else float("nan")


def batch_scaling(tubelet, model, batches, repeats):
    rows = []
    for b in batches:
        r = subprocess.run([tubelet, "bench", "--model", model, "--batch", str(b), "--repeats",
                            str(repeats), "--json"], capture_output=True, text=True, check=True)
        j = json.loads(r.stdout)
        rows.append((b, j["ms_median"], j["ms_per_clip"], j["clips_per_s"]))
    return rows


def make_videomae(out):
    """VideoMAE-B with random weights (transformers' defaults: 16 frames of 224x224, 2 labels
    unless set: 400 as Kinetics) and its image processor, in out."""
    from transformers import (VideoMAEConfig, VideoMAEForVideoClassification,
                              VideoMAEImageProcessor)
    cfg = VideoMAEConfig(num_labels=400)
    VideoMAEForVideoClassification(cfg).save_pretrained(out)
    VideoMAEImageProcessor().save_pretrained(out)


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join((f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}")
                                if isinstance(v, float) else str(v) for v in r) + " |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "motion-vivit"))
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--videomae-requests", type=int, default=40)
    ap.add_argument("--no-videomae", action="store_true")
    ap.add_argument("--split", default="0:2,0:1,0:4,1:1,1:2",
                    help="THREADS:WORKERS pairs to compare (0 threads: every core); the first "
                         "should be serve's default")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=5, help="tubelet bench --repeats")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.model, "examples", "*.mp4")))
    if not files:
        sys.exit(f"no examples in {a.model}/examples")
    bodies = [open(f, "rb").read() for f in files]
    ncpu = os.cpu_count() or 1

    peak = fma_peak(ncpu)
    k = peak["kernels"]["fp32_fma"]
    g = k["gflops"][str(ncpu)]
    print(f"CPU: {cpu_name()}, {ncpu} cores; fp32 peak on {ncpu} threads: {g['median']} GFLOP/s "
          f"median, {g['best']} best ({k['what']}; build/fma_peak, same run)\n")

    mb = ["--max-batch", "1"]
    print(f"## {os.path.basename(a.model.rstrip('/'))}: {a.requests} requests per level, the "
          f"{len(files)} example clips\n")
    rows = serve_rows(a.tubelet, a.model, mb, bodies, a.requests, a.concurrency, "--max-batch 1")
    rows += serve_rows(a.tubelet, a.model, [], bodies, a.requests, a.concurrency,
                       "dynamic (default)")
    table(["server", "concurrency", "clips/s", "p50 ms", "p99 ms", "mean batch", "errors"], rows)
    log("classify over the same files")
    rate = classify_rate(a.tubelet, a.model, files, max(a.requests, len(files) + 1))
    alone = rows[0][2]  # --max-batch 1, the lowest concurrency
    print(f"`tubelet classify` over the same files: {rate:.1f} clips/s (load excluded). Serving "
          f"overhead, one request at a time (--max-batch 1, concurrency {rows[0][1]}): "
          + (f"{100 * (1 - alone / rate):.1f} % fewer clips/s than classify"
             if alone < rate else f"none: serve is {alone / rate:.2f}x classify's clips/s")
          + " (target: within 5 %)\n")

    log("batch scaling (tubelet bench)")
    print("### The model's own batch scaling (`tubelet bench --batch B`, random input)\n")
    table(["batch", "ms per forward", "ms per clip", "clips/s"],
          batch_scaling(a.tubelet, a.model, a.batches, a.repeats))

    print(f"### --threads / --workers at concurrency {max(a.concurrency)} (dynamic batching)\n")
    split_rows = []
    for pair in a.split.split(","):
        th, wk = (int(x) for x in pair.split(":"))
        args = (["--threads", str(th)] if th else []) + ["--workers", str(wk)]
        r = serve_rows(a.tubelet, a.model, args, bodies, a.requests, [max(a.concurrency)],
                       f"threads {th or 'all'}, workers {wk}")
        split_rows += [(r[0][0],) + r[0][2:]]
    table(["split", "clips/s", "p50 ms", "p99 ms", "mean batch", "errors"], split_rows)

    if not a.no_videomae:
        with tempfile.TemporaryDirectory() as d:
            log("VideoMAE-B with random weights (transformers)")
            make_videomae(d)
            print(f"## VideoMAE-B (random weights): {a.videomae_requests} requests per level\n")
            rows = []
            for args, label in ((mb, "--max-batch 1"), ([], "dynamic (default)")):
                rows += serve_rows(a.tubelet, d, args, bodies, a.videomae_requests, [1, 4], label)
            table(["server", "concurrency", "clips/s", "p50 ms", "p99 ms", "mean batch", "errors"],
                  rows)
            vrate = classify_rate(a.tubelet, d, files, max(a.videomae_requests, 2))
            print(f"`tubelet classify` over the same files: {vrate:.2f} clips/s (load excluded)\n")


if __name__ == "__main__":
    main()
