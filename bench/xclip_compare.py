#!/usr/bin/env python3
"""X-CLIP forward latency: PyTorch eager + transformers' XCLIPModel and tubelet, at the published
shapes of X-CLIP-B/32 and B/16 (microsoft/xclip-base-patch32 / -patch16: ViT-B vision tower,
8 frames of 224², 512-wide text tower, MIT of 1 layer, 2 prompt-generator layers), random
weights, fp32, the same thread count, batch 1 and 4 (docs/zero-shot.md).

Usage:
    /work/venv/bin/python bench/xclip_compare.py [--arch b32 b16] [--batch 1 4] [--threads 2]
        [--repeats 3] [--rounds 2] [--labels 3] [--tubelet build/tubelet]
        [--peers torch,torch-video,ort,ort-video,tubelet] [--label-sets 3 101 400] [--json FILE]

Peers, each (arch, batch, peer) in its own process, the rounds interleaving them (round 1:
every peer, round 2: the same again), each process timing `--repeats` forwards after one warm-up
and reporting their median; a row gives the median over rounds, their spread, the peak RSS of
the process (os.wait4) and the share of the FP32 FMA peak (build/fma_peak, same run):
  torch        XCLIPModel(input_ids, pixel_values): the whole forward with --labels texts
               (text tower included, as transformers runs it for every call)
  torch-video  XCLIPModel.get_video_features(pixel_values): vision tower + MIT, what a cached
               label set leaves per clip on the PyTorch side (without the prompt generator)
  tubelet      `tubelet bench --arch xclip-bNN --batch B --json`: tubelet_forward on an X-CLIP
               state, the video side (vision tower with message tokens, MIT, the prompt
               generator's visual input); the label set's text embeddings are computed once per
               set (tubelet_encode_text) and not timed, the prompt generator and logits over the
               labels (tubelet_forward_text) are not in this figure either
  ort          ONNX Runtime (CPU provider, the same threads) on torch.onnx.export of the whole
               forward (input_ids, pixel_values -> logits_per_video; opset 17, the TorchScript
               exporter), cached in the temp directory
  ort-video    the same on get_video_features(pixel_values) (last_hidden_state, pooler_output)
FLOPs: `tubelet info --arch xclip-bNN --json` (2 x multiply-adds of the video side), the same
count for every peer. An export that fails is reported as the peer's failure, with its error.

Then what a cached label set adds per clip (issue 31's target: under 1 ms): build/xclip_labels
(bench/xclip_labels.c, compiled here when missing) times tubelet_forward_text against
--label-sets cached text embeddings minus tubelet_encode_video on the same clip, on a model with
the published projection_dim, patch grid, frames, text tower and prompt generator and a shrunk
(1-layer, 64-wide) vision tower, which the prompt generator and logits do not depend on.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def torch_peer(arch, batch, threads, repeats, labels, video_only, ort):
    import tempfile
    import torch
    from transformers import XCLIPConfig, XCLIPModel
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    cfg = XCLIPConfig(vision_config={"patch_size": 16 if arch == "b16" else 32})
    m = XCLIPModel(cfg).eval()
    x = torch.randn(batch, 8, 3, 224, 224)
    ids = torch.randint(0, 49406, (labels, 77))
    ids[:, 0], ids[:, 8:] = 49406, 49407  # start, 7 tokens, end (and its padding)
    if ort:
        import onnxruntime as rt

        class Video(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                o = self.m.get_video_features(pixel_values=x)
                return o.last_hidden_state, o.pooler_output

        class Whole(Video):
            def forward(self, ids, x):
                return self.m(input_ids=ids, pixel_values=x).logits_per_video

        args = (x,) if video_only else (ids, x)
        kind = "video" if video_only else f"l{labels}"
        path = os.path.join(tempfile.gettempdir(), f"xclip_{arch}_b{batch}_{kind}_opset17.onnx")
        if not os.path.exists(path):
            try:
                torch.onnx.export((Video if video_only else Whole)(m), args, path + ".tmp",
                                  opset_version=17, dynamo=False)
                os.replace(path + ".tmp", path)
            except Exception as e:  # the peer fails with the exporter's error
                sys.exit(f"torch.onnx.export failed: {type(e).__name__}: {e}")
        so = rt.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
        run = lambda: sess.run(None, feed)  # noqa: E731
    elif video_only:
        def run():
            with torch.inference_mode():
                return m.get_video_features(pixel_values=x)
    else:
        def run():
            with torch.inference_mode():
                return m(input_ids=ids, pixel_values=x)
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
    ap.add_argument("--arch", nargs="+", default=["b32", "b16"])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--labels", type=int, default=3)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma_peak"))
    ap.add_argument("--peers", default="torch,torch-video,ort,ort-video,tubelet")
    ap.add_argument("--label-sets", nargs="*", type=int, default=[3, 101, 400],
                    help="label counts for the cached-label-set cost (none: skip it)")
    ap.add_argument("--labels-bin", default=os.path.join(ROOT, "build", "xclip_labels"))
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:  # child process: one measurement
        print(json.dumps({"ms": torch_peer(a.arch[0], a.batch[0], a.threads, a.repeats,
                                           a.labels, a.peer.endswith("-video"),
                                           a.peer.startswith("ort"))}))
        return
    cpu, isa = C.cpu_and_isa()
    print(f"CPU: {cpu} ({isa}), loadavg before: {open('/proc/loadavg').read().strip()}", flush=True)
    peak = C.fma_peak(a.fma_peak, a.threads)
    print(f"FP32 FMA peak at {a.threads} threads: {peak.get('gflops', '?')} GFLOP/s", flush=True)
    gflop = {}
    for arch in a.arch:
        info = subprocess.run([a.tubelet, "info", "--arch", f"xclip-{arch}", "--json"],
                              capture_output=True, text=True)
        gflop[arch] = json.loads(info.stdout).get("gflop_per_clip") if info.returncode == 0 else None
    rows = {}
    peers = a.peers.split(",")
    for r in range(a.rounds):
        for arch in a.arch:
            for batch in a.batch:
                for peer in peers:
                    if peer == "tubelet":
                        cmd = [a.tubelet, "bench", "--arch", f"xclip-{arch}", "--batch",
                               str(batch), "--threads", str(a.threads), "--repeats",
                               str(a.repeats), "--warmup", "1", "--json"]
                    else:
                        cmd = [sys.executable, __file__, "--peer", peer, "--arch", arch,
                               "--batch", str(batch), "--threads", str(a.threads),
                               "--repeats", str(a.repeats), "--labels", str(a.labels)]
                    res = C.run_child(cmd, 3600)
                    ms = None
                    if res["rc"] == 0:
                        j = json.loads(res["stdout"].strip().splitlines()[-1])
                        ms = j["ms_median"] if peer == "tubelet" else j["ms"]
                    rows.setdefault((arch, batch, peer), []).append(
                        {"ms": ms, "rss": res["peak_rss_mb"],
                         "other_load": res["other_load_lifetime"]})
                    print(f"round {r + 1} xclip-{arch} batch {batch} {peer:11s} " +
                          (f"{ms:9.1f} ms  {res['peak_rss_mb']:7.0f} MB  other load "
                           f"{res['other_load_lifetime']:.2f}" if ms else
                           f"failed: {res['stderr'].strip()[-300:]}"), flush=True)
    print(f"loadavg after: {open('/proc/loadavg').read().strip()}\n")
    print(f"| model | batch | peer | ms (median of {a.rounds} rounds) | spread | GFLOP/s (video "
          "side) | % of peak | peak RSS MB | vs tubelet |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arch in a.arch:
        for batch in a.batch:
            tb = [x["ms"] for x in rows.get((arch, batch, "tubelet"), []) if x["ms"]]
            tbm = statistics.median(tb) if tb else None
            for peer in peers:
                ms = [x["ms"] for x in rows[(arch, batch, peer)] if x["ms"]]
                name = f"X-CLIP-{arch.upper()}"
                if not ms:
                    print(f"| {name} | {batch} | {peer} | failed | | | | | |")
                    continue
                med = statistics.median(ms)
                gf = batch * gflop[arch] / (med / 1e3) if gflop[arch] else None
                pk = 100 * gf / peak["gflops"] if gf and peak.get("ok") else None
                rss = max(x["rss"] for x in rows[(arch, batch, peer)])
                rel = f"{med / tbm:.2f}x" if tbm else ""
                print(f"| {name} | {batch} | {peer} | {med:.0f} | {min(ms):.0f}-{max(ms):.0f} | "
                      + (f"{gf:.1f} | {pk:.0f} % |" if gf and pk else " | |")
                      + f" {rss:.0f} | {rel} |")
    labels = label_costs(a) if a.label_sets else []
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "isa": isa, "peak": peak, "gflop": gflop,
                       "rows": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in rows.items()},
                       "label_sets": labels}, f, indent=1)


LIBS = ("-ldnnl -lcjson -lavformat -lavcodec -lswscale -lavutil -lavdevice -lzip -lmsgpackc "
        "-lpcre2-8 -lutf8proc -lm -lmicrohttpd -lpthread").split()


def label_costs(a):
    """What a cached label set adds per clip: bench/xclip_labels.c on a model with a shrunk
    vision tower (the prompt generator and the logits at the published shapes)."""
    import tempfile
    from transformers import XCLIPConfig
    if not os.path.exists(a.labels_bin):
        subprocess.run(["gcc", "-O2", "-march=native", "-fopenmp", "-std=c11", "-D_GNU_SOURCE",
                        "-I" + os.path.join(ROOT, "include"),
                        os.path.join(ROOT, "bench", "xclip_labels.c"),
                        os.path.join(ROOT, "build", "libtubelet.a")] + LIBS +
                       ["-o", a.labels_bin], check=True)
    out = []
    print("\n| model | batch | labels | ms added per clip (median) | min-max | video pass ms "
          "| with labels ms |\n|---|---|---|---|---|---|---|")
    for arch in a.arch:
        with tempfile.TemporaryDirectory() as d:
            XCLIPConfig(vision_config={"patch_size": 16 if arch == "b16" else 32,
                                       "hidden_size": 64, "num_hidden_layers": 1,
                                       "num_attention_heads": 1, "intermediate_size": 64}
                        ).save_pretrained(d)
            for batch in a.batch:
                res = subprocess.run([a.labels_bin, "--model", d, "--batch", str(batch),
                                      "--threads", str(a.threads), "--repeats",
                                      str(max(5, a.repeats)), "--labels"] +
                                     [str(n) for n in a.label_sets],
                                     capture_output=True, text=True)
                if res.returncode:
                    print(f"| X-CLIP-{arch.upper()} | {batch} | | failed: "
                          f"{res.stderr.strip()[-200:]} | | | |")
                    continue
                for line in res.stdout.splitlines():
                    j = json.loads(line)
                    j["arch"] = arch
                    out.append(j)
                    print(f"| X-CLIP-{arch.upper()} | {batch} | {j['labels']} | "
                          f"{j['ms_added_per_clip']:.2f} | {j['ms_added_min']:.2f}-"
                          f"{j['ms_added_max']:.2f} | {j['ms_video']:.1f} | {j['ms_text']:.1f} |",
                          flush=True)
    return out


if __name__ == "__main__":
    main()
