#!/usr/bin/env python3
"""Video Swin forward latency: torchvision eager, ONNX Runtime (on torchvision's export) and
tubelet, at batch 1, 32x224², fp32, random weights, the same thread count (docs/video-swin.md).

Usage:
    /work/venv/bin/python bench/video_swin_compare.py [--arch t b] [--threads 2] [--repeats 3]
        [--rounds 2] [--tubelet build/tubelet] [--peers torch,ort,tubelet] [--json FILE]

Every (arch, peer) runs in its own process; the rounds interleave the peers (round 1: torch, ort,
tubelet; round 2: the same again), so that a change in the machine's load or clock hits every
peer alike. Each process times `--repeats` forwards after one warm-up and reports their median;
a row gives the median over rounds, the spread (min-max of the rounds), peak RSS of the process
(os.wait4: imports, model build, ONNX session, the forwards) and the share of the FP32 FMA peak
measured by build/fma_peak in the same run. FLOPs: `tubelet info --arch video-swin-X --json`
(2 x multiply-adds of every product, attention included) — the same count for every peer.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def torch_peer(arch, threads, repeats, ort):
    import torch
    from torchvision.models.video import swin3d_b, swin3d_s, swin3d_t
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    m = {"t": swin3d_t, "s": swin3d_s, "b": swin3d_b}[arch]().eval()
    x = torch.randn(1, 3, 32, 224, 224)
    if ort:
        import onnxruntime as rt
        path = os.path.join(tempfile.gettempdir(), f"swin3d_{arch}.onnx")
        if not os.path.exists(path):
            torch.onnx.export(m, (x,), path, opset_version=17, dynamo=False)
        so = rt.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x.numpy()}
        run = lambda: sess.run(None, feed)  # noqa: E731
    else:
        def run():
            with torch.inference_mode():
                return m(x)
    run()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        ts.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ts)


def main():
    import compare as C
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", nargs="+", default=["t", "b"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma_peak"))
    ap.add_argument("--peers", default="torch,ort,tubelet")
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:  # child process: one measurement
        print(json.dumps({"ms": torch_peer(a.arch[0], a.threads, a.repeats, a.peer == "ort")}))
        return
    cpu, isa = C.cpu_and_isa()
    print(f"CPU: {cpu} ({isa}), loadavg before: {open('/proc/loadavg').read().strip()}", flush=True)
    peak = C.fma_peak(a.fma_peak, a.threads)
    print(f"FP32 FMA peak at {a.threads} threads: {peak.get('gflops', '?')} GFLOP/s", flush=True)
    gflop = {}
    for arch in a.arch:
        info = subprocess.run([a.tubelet, "info", "--arch", f"video-swin-{arch}", "--json"],
                              capture_output=True, text=True)
        gflop[arch] = json.loads(info.stdout).get("gflop_per_clip") if info.returncode == 0 else None
    rows = {}
    peers = a.peers.split(",")
    for r in range(a.rounds):
        for arch in a.arch:
            for peer in peers:
                if peer == "tubelet":
                    cmd = [a.tubelet, "bench", "--arch", f"video-swin-{arch}", "--threads",
                           str(a.threads), "--repeats", str(a.repeats), "--warmup", "1", "--json"]
                else:
                    cmd = [sys.executable, __file__, "--peer", peer, "--arch", arch,
                           "--threads", str(a.threads), "--repeats", str(a.repeats)]
                res = C.run_child(cmd, 1800)
                ms = None
                if res["rc"] == 0:
                    j = json.loads(res["stdout"].strip().splitlines()[-1])
                    ms = j["ms_median"] if peer == "tubelet" else j["ms"]
                rows.setdefault((arch, peer), []).append({"ms": ms, "rss": res["peak_rss_mb"],
                                                          "other_load": res["other_load_lifetime"]})
                print(f"round {r + 1} video-swin-{arch} {peer:8s} " +
                      (f"{ms:9.1f} ms  {res['peak_rss_mb']:7.0f} MB  other load {res['other_load_lifetime']:.2f}"
                       if ms else f"failed: {res['stderr'].strip()[-300:]}"), flush=True)
    print(f"loadavg after: {open('/proc/loadavg').read().strip()}\n")
    print(f"| model | peer | ms (median of {a.rounds} rounds) | spread | GFLOP/s | % of peak | peak RSS MB | vs tubelet |")
    print("|---|---|---|---|---|---|---|---|")
    for arch in a.arch:
        tb = [x["ms"] for x in rows.get((arch, "tubelet"), []) if x["ms"]]
        tbm = statistics.median(tb) if tb else None
        for peer in peers:
            ms = [x["ms"] for x in rows[(arch, peer)] if x["ms"]]
            if not ms:
                print(f"| Swin-{arch.upper()} | {peer} | failed | | | | | |")
                continue
            med = statistics.median(ms)
            gf = gflop[arch] / (med / 1e3) if gflop[arch] else None
            pk = 100 * gf / peak["gflops"] if gf and peak.get("ok") else None
            rss = max(x["rss"] for x in rows[(arch, peer)])
            print(f"| Swin-{arch.upper()} | {peer} | {med:.0f} | {min(ms):.0f}-{max(ms):.0f} | "
                  f"{gf:.1f} | {pk:.0f} % | {rss:.0f} | {med / tbm:.2f}x |" if gf and pk else
                  f"| Swin-{arch.upper()} | {peer} | {med:.0f} | | | | {rss:.0f} | |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "isa": isa, "peak": peak, "gflop": gflop,
                       "rows": {f"{k[0]}/{k[1]}": v for k, v in rows.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
