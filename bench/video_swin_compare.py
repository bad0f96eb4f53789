#!/usr/bin/env python3
"""Video Swin forward latency: torchvision eager, ONNX Runtime (on torchvision's export) and
tubelet, at batch 1, 32x224², fp32, random weights, the same thread count (docs/video-swin.md).

Usage:
    /work/venv/bin/python bench/video_swin_compare.py [--arch t b] [--threads 2] [--repeats 3]
        [--tubelet build/tubelet] [--peers torch,ort,tubelet]

Prints one line per (arch, peer): median ms of the timed forwards after one warm-up. Each peer
runs in its own process. The machine is shared: read the numbers with /proc/loadavg (printed).
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


def torch_peer(arch, threads, repeats, ort):
    import torch
    from torchvision.models.video import swin3d_b, swin3d_s, swin3d_t
    torch.set_num_threads(threads)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", nargs="+", default=["t", "b"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--peers", default="torch,ort,tubelet")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:  # child process: one measurement
        print(json.dumps({"ms": torch_peer(a.arch[0], a.threads, a.repeats, a.peer == "ort")}))
        return
    print(f"loadavg before: {open('/proc/loadavg').read().strip()}")
    for arch in a.arch:
        for peer in a.peers.split(","):
            if peer == "tubelet":
                out = subprocess.run([a.tubelet, "bench", "--arch", f"video-swin-{arch}",
                                      "--threads", str(a.threads), "--repeats", str(a.repeats),
                                      "--warmup", "1", "--json"], capture_output=True, text=True)
                ms = json.loads(out.stdout)["ms_median"] if out.returncode == 0 else None
            else:
                out = subprocess.run([sys.executable, __file__, "--peer", peer, "--arch", arch,
                                      "--threads", str(a.threads), "--repeats", str(a.repeats)],
                                     capture_output=True, text=True)
                ms = json.loads(out.stdout.strip().splitlines()[-1])["ms"] \
                    if out.returncode == 0 else None
            print(f"video-swin-{arch} {peer:8s} " +
                  (f"{ms:9.1f} ms" if ms else f"failed: {out.stderr.strip()[-300:]}"), flush=True)
    print(f"loadavg after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
