#!/usr/bin/env python3
"""Reduced precision: tubelet fp32 / bf16 / int8 against PyTorch fp32 / bf16 and ONNX Runtime fp32 /
int8 (its own dynamic quantisation of the same exported model): speed, peak RSS, accuracy. Writes
the section between <!-- precision:begin --> and <!-- precision:end --> of bench/RESULTS.md.

Models: the random-weight ViT-B models of compare.py (videomae-base, timesformer-base, vivit-base),
one save_pretrained directory each (train_compare.py's bench/out/train-NAME, built once), so every
peer runs the same weights:
  tubelet        `tubelet bench --model DIR --precision P --batch B --threads T --json`
  torch-fp32     transformers' *ForVideoClassification, eval, inference_mode, fp32
  torch-bf16     the same after model.to(torch.bfloat16), bf16 input (PyTorch's oneDNN bf16 kernels)
  ort-fp32       torch.onnx.export of the same model (opset 17, dynamic batch), ORT_ENABLE_ALL
  ort-int8       onnxruntime.quantization.quantize_dynamic of that file: s8 weights per channel,
                 u8 activations quantised per tensor at run time (MatMulInteger / DynamicQuantizeLinear)
  ov-fp32, ov-bf16  OpenVINO's CPU plugin on the fp32 ONNX file: LATENCY hint, 1 stream,
                 INFERENCE_NUM_THREADS=T, INFERENCE_PRECISION_HINT f32 / bf16 (on a CPU without
                 AVX512-BF16 or AMX the plugin runs bf16 requests in f32: the row says which it ran)
  ov-int8        NNCF post-training quantisation (nncf.quantize, 8 calibration inputs of compare.py's
                 kind) of the same graph, run with the ov-fp32 settings; skipped when nncf is absent
Every timing runs in its own process under `flock /tmp/tubelet-bench.lock` (peak RSS from wait4),
after waiting for the other processes on the machine to go quiet (compare.py's helpers); the others'
load during the timed calls is recorded.

Accuracy:
  * max |logit - fp32 logit| on the random-weight ViT-B models (batch 1, compare.py's input), every
    peer against PyTorch fp32 (and tubelet's reduced precisions against tubelet fp32);
  * top-1 agreement with fp32 and accuracy of models/motion-vivit on a motion set written by
    `tubelet synth` (the four move_* classes the model knows, 64x64, 8 frames, a seed it never saw).

Usage:
  /work/main/.venv/bin/python bench/precision.py                 # 3 models, batch 1 and 4, 2 threads
  /work/main/.venv/bin/python bench/precision.py --arch vivit-base --batch 1 --peers tubelet
"""
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (configs, input, process and idle helpers, section writer)
import train_compare as TC  # noqa: E402  (the save_pretrained model directories)

ROOT = C.ROOT
OUT_DIR = os.path.join(ROOT, "bench", "out")
BEGIN, END = "<!-- precision:begin -->", "<!-- precision:end -->"
LOCK = "/tmp/tubelet-bench.lock"
PEERS = ["tubelet-fp32", "tubelet-bf16", "tubelet-int8", "torch-fp32", "torch-bf16", "ort-fp32",
         "ort-int8", "ov-fp32", "ov-bf16", "ov-int8"]


# ---------------------------------------------------------------------------------------------
# children: `precision.py --_child MODE --job FILE --result FILE`


def child_export(job):
    """ONNX fp32 (dynamic batch) of the save_pretrained model, and ORT's dynamic int8 of it."""
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic
    spec = C.ARCHS[job["arch"]]
    model = getattr(transformers, spec["cls"]).from_pretrained(job["model_dir"]).eval()
    x = torch.from_numpy(C.make_input(job["arch"], 1))
    t0 = time.time()
    with torch.no_grad():
        torch.onnx.export(model, (x,), job["fp32"], input_names=["pixel_values"],
                          output_names=["logits"], opset_version=17, dynamo=False,
                          dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    t1 = time.time()
    if job["int8"]:
        quantize_dynamic(job["fp32"], job["int8"], weight_type=QuantType.QInt8, per_channel=True)
    return {"export_s": t1 - t0, "quantize_s": time.time() - t1}


def child_run(job):
    """Times one peer; also returns its batch-1 logits of compare.py's input."""
    import numpy as np
    peer, arch, batch, T = job["peer"], job["arch"], job["batch"], job["threads"]
    x = C.make_input(arch, batch)
    if peer.startswith("torch"):
        import torch
        import transformers
        torch.set_num_threads(T)
        spec = C.ARCHS[arch]
        model = getattr(transformers, spec["cls"]).from_pretrained(job["model_dir"]).eval()
        dt = torch.bfloat16 if peer == "torch-bf16" else torch.float32
        model = model.to(dt)
        xt = torch.from_numpy(x).to(dt)

        def run():
            with torch.inference_mode():
                return model(pixel_values=xt).logits.float().numpy()
    elif peer.startswith("ov-"):
        import openvino as ov
        core = ov.Core()
        prec = {"ov-bf16": "bf16"}.get(peer, "f32")
        model = core.read_model(job["onnx"])
        if peer == "ov-int8":
            import nncf  # noqa: F401  (ImportError: the row is reported as failed, with the reason)
            calib = nncf.Dataset([C.make_input(arch, 1) for _ in range(8)])
            model = nncf.quantize(model, calib, subset_size=8)
        compiled = core.compile_model(model, "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(T),
            "INFERENCE_PRECISION_HINT": prec})
        req = compiled.create_infer_request()
        ran = str(compiled.get_property("INFERENCE_PRECISION_HINT"))

        def run():
            return req.infer({0: x})[compiled.output(0)].copy()
    else:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads, so.inter_op_num_threads = T, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(job["onnx"], so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name

        def run():
            return sess.run(None, {name: x})[0]
    logits = run()[:1]  # the first call doubles as warm-up
    ms, other = C.timed_repeats(run, job["repeats"], max(0, job["warmup"] - 1), job["tries"],
                                C.allowed_other(job["max_other"], T), job["wait_idle"])
    np.save(job["logits"], np.asarray(logits, dtype=np.float32))
    res = {"ms": ms, "other_load": other}
    if peer.startswith("ov-"):
        res["ran_precision"] = ran
    return res


def child_main(a):
    with open(a.job) as f:
        job = json.load(f)
    return C.write_child_result(a.result, {"export": child_export, "run": child_run}[a._child], job)


def run_py_child(mode, job, timeout, lock):
    """Runs a child of this script in its own process (compare.run_job_child), under the bench
    lock when `lock`."""
    return C.run_job_child(__file__, mode, job, timeout, LOCK if lock else None)


# ---------------------------------------------------------------------------------------------
# parent


def ensure_onnx(arch, model_dir, log, timeout, want_int8=True):
    """The fp32 ONNX file (ORT and OpenVINO read it) and, when want_int8, ORT's int8 of it."""
    fp32 = os.path.join(OUT_DIR, f"precision-{arch}-fp32.onnx")
    int8 = os.path.join(OUT_DIR, f"precision-{arch}-int8.onnx")
    side = fp32 + ".json"
    want = {"model_dir": os.path.relpath(model_dir, ROOT), "opset": 17, "quant": "dynamic s8 per channel",
            "mtime": os.path.getmtime(os.path.join(model_dir, "model.safetensors"))}
    try:
        with open(side) as f:
            if json.load(f) == want and os.path.exists(fp32) and (os.path.exists(int8) or not want_int8):
                return fp32, int8
    except (OSError, ValueError):
        pass
    log(f"exporting {arch} to ONNX" + (" and quantising it (ORT quantize_dynamic)" if want_int8 else ""))
    res, _ = run_py_child("export", {"arch": arch, "model_dir": model_dir, "fp32": fp32,
                                     "int8": int8 if want_int8 else None, "threads": 2}, timeout,
                          lock=False)
    if not res.get("ok"):
        raise RuntimeError(f"export of {arch} failed: {res.get('error')}")
    with open(side, "w") as f:
        json.dump(want, f)
    return fp32, int8


def measure(peer, arch, batch, model_dir, onnx, a, log):
    import numpy as np
    row = {"arch": arch, "batch": batch, "threads": a.threads, "peer": peer, "status": "ok",
           "date": datetime.datetime.now().isoformat(timespec="seconds")}
    logits_path = os.path.join(OUT_DIR, f"precision-logits-{arch}-{peer}.npy")
    C.wait_idle(a.wait_idle, C.allowed_other(a.max_other, a.threads))
    if peer.startswith("tubelet"):
        prec = peer.split("-", 1)[1]
        cmd = ["flock", LOCK, a.tubelet, "bench", "--model", model_dir, "--precision", prec,
               "--batch", str(batch), "--threads", str(a.threads), "--json", "--repeats",
               str(a.repeats), "--warmup", str(a.warmup)]
        r = C.run_child(cmd, a.timeout, env=C.child_env(a.threads))
        try:
            j = C.parse_tubelet_json(r["stdout"])
        except ValueError as e:
            return dict(row, status="failed", error=f"{e}: {r['stderr'][-500:]}")
        row.update(ms=j["ms_median"], ms_min=j["ms_min"], peak_rss_mb=r["peak_rss_mb"],
                   linear_weight_mb=j.get("linear_weight_mb"), native=j.get("precision_native"),
                   other_load=r["other_load_lifetime"])
        if batch == 1:  # the logits of compare.py's input, for the accuracy table
            xin = os.path.join(OUT_DIR, f"precision-input-{arch}.npy")
            np.save(xin, C.make_input(arch, 1))
            p = subprocess.run([a.tubelet, "run", "--model", model_dir, "--input", xin, "--logits",
                                logits_path, "--precision", prec, "--threads", str(a.threads)],
                               capture_output=True, text=True, timeout=a.timeout)
            if p.returncode:
                row["notes"] = f"tubelet run failed: {p.stderr[-300:]}"
        return row
    job = {"peer": peer, "arch": arch, "batch": batch, "threads": a.threads, "model_dir": model_dir,
           "onnx": onnx[1] if peer == "ort-int8" else onnx[0], "repeats": a.repeats,
           "warmup": a.warmup, "tries": a.tries, "max_other": a.max_other, "wait_idle": a.wait_idle,
           "logits": logits_path if batch == 1 else os.path.join(OUT_DIR, "precision-scratch.npy")}
    res, r = run_py_child("run", job, a.timeout, lock=True)
    if not res.get("ok"):
        return dict(row, status="failed", error=res.get("error"))
    row.update(ms=statistics.median(res["ms"]), ms_min=min(res["ms"]), peak_rss_mb=r["peak_rss_mb"],
               other_load=res["other_load"])
    if res.get("ran_precision"):
        row["notes"] = f"OpenVINO inference precision: {res['ran_precision']}"
    return row


def logit_errors(arch):
    """max |logits - reference| per peer, against torch-fp32 and (tubelet) tubelet-fp32."""
    import numpy as np
    L = {}
    for p in PEERS:
        f = os.path.join(OUT_DIR, f"precision-logits-{arch}-{p}.npy")
        if os.path.exists(f):
            L[p] = np.load(f).reshape(-1)
    out = {}
    for p, v in L.items():
        e = {}
        if "torch-fp32" in L:
            e["vs_torch_fp32"] = float(np.abs(v - L["torch-fp32"]).max())
            e["top1_same_as_torch_fp32"] = bool(v.argmax() == L["torch-fp32"].argmax())
        if p.startswith("tubelet") and "tubelet-fp32" in L:
            e["vs_tubelet_fp32"] = float(np.abs(v - L["tubelet-fp32"]).max())
        e["max_abs_logit"] = float(np.abs(v).max())
        out[p] = e
    return out


def motion_eval(a, log):
    """models/motion-vivit on a synth set of the four move_* classes: per precision, accuracy and
    top-1 agreement with fp32."""
    d = os.path.join(OUT_DIR, f"precision-motion-s{a.motion_seed}-n{a.motion_per_class}")
    if not os.path.exists(os.path.join(d, "val.csv")):
        log(f"writing the motion set {os.path.relpath(d, ROOT)}")
        subprocess.run([a.tubelet, "synth", "-o", d, "--per-class", str(a.motion_per_class),
                        "--frames", "8", "--size", "64", "--seed", str(a.motion_seed),
                        "--distractors", "0", "--noise", "0", "--force"], check=True,
                       capture_output=True)
    clips = []
    for split in ("train.csv", "val.csv"):  # the model never saw this seed: every clip is held out
        with open(os.path.join(d, split)) as f:
            clips += [(os.path.join(d, r["path"]), r["label"]) for r in csv.DictReader(f)
                      if r["label"].startswith("move_")]
    res = {"clips": len(clips), "seed": a.motion_seed, "per_class": a.motion_per_class}
    top = {}
    for prec in ("fp32", "bf16", "int8", "bf16-ref", "int8-ref"):
        p = subprocess.run([a.tubelet, "classify", "--model", os.path.join(ROOT, "models", "motion-vivit"),
                            "--precision", prec, "--threads", str(a.threads), "--top", "1", "--json"]
                           + [c for c, _ in clips], capture_output=True, text=True, timeout=a.timeout)
        out = json.loads(p.stdout)
        top[prec] = [(o["top"][0]["label"], o["top"][0]["score"]) if "top" in o else (None, None)
                     for o in out]
    for prec, t in top.items():
        res[prec] = {
            "accuracy": sum(lab == y for (lab, _), (_, y) in zip(t, clips)) / len(clips),
            "agree_fp32": sum(lab == f for (lab, _), (f, _) in zip(t, top["fp32"])) / len(clips),
            "max_score_diff": max(abs(s - fs) for (_, s), (_, fs) in zip(t, top["fp32"])
                                  if s is not None and fs is not None),
        }
    return res


def fmt(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def peak_sentence(data):
    pk = data.get("fma_peak") or {}
    if not pk.get("ok"):
        return " FP32 FMA peak: not measured in this run."
    return (f" FP32 FMA peak at {pk['threads']} threads, measured at the start of this run "
            f"(`build/fma_peak`, median of 11): {pk['gflops']:.0f} GFLOP/s.")


def native_sentence(rows):
    """Which kernels tubelet's reduced precisions ran: the rows' `native` (1: oneDNN's AVX512-BF16 /
    VNNI / AMX kernels; 0: the portable path, on a CPU without those instructions)."""
    ran = {r["peer"]: r.get("native") for r in rows if r.get("peer") in ("tubelet-bf16", "tubelet-int8")
           and r.get("status") == "ok"}
    portable = sorted(p for p, n in ran.items() if n == 0)
    if not portable:
        return ""
    return (" On this CPU " + " and ".join(portable) + " ran the portable path (no AVX512-BF16 / "
            "VNNI: the same rounded values multiplied in f32, docs/precision.md), not the kernels named above.")


def render(data):
    rows = data["rows"]
    L = ["## Reduced precision", "",
         "`bench/precision.py` (docs/precision.md): tubelet's linear layers in bf16 (oneDNN matmul, AVX512-BF16) "
         "and int8 (s8 weights per channel, u8 activations per tensor, VNNI) against PyTorch fp32 / bf16 "
         "(`model.to(torch.bfloat16)`) and ONNX Runtime fp32 / int8 (`quantize_dynamic`, s8 per channel, "
         "of the same exported model). The same random-weight ViT-B models for every peer (one "
         "`save_pretrained` directory each), " + f"{data['threads']} threads, median of {data['repeats']} "
         "calls after a warm-up, each in its own process under `flock` (peak RSS from wait4: for PyTorch "
         "and ONNX Runtime it includes the Python runtime and libraries, ~300-550 MB). `other` = the cores "
         "other processes used meanwhile (the machine is shared by several jobs; numbers taken under load are "
         "slower and noisier).", "",
         f"Machine: {data['machine'].get('model')}, {data['machine'].get('cpus')} CPUs; "
         f"{data['date']}; torch {data['versions'].get('torch')}, onnxruntime "
         f"{data['versions'].get('onnxruntime')}." + peak_sentence(data) + native_sentence(rows), ""]
    by = {}
    for r in rows:
        by.setdefault((r["arch"], r["batch"]), {})[r["peer"]] = r
    L += ["| model | batch | " + " | ".join(PEERS) + " | tubelet bf16 vs best fp32 peer | tubelet bf16 vs "
          "tubelet fp32 | tubelet int8 vs ort-int8 |",
          "|---|---|" + "---|" * len(PEERS) + "---|---|---|"]
    for (arch, batch), rr in sorted(by.items()):
        cells = []
        for p in PEERS:
            r = rr.get(p)
            if not r or r["status"] != "ok":
                cells.append("failed" if r else "-")
                continue
            load = (f"other {r['other_load']:.1f}" if r.get("other_load") is not None
                    else f"load avg {r.get('loadavg', '?')}")
            rss = f"<br>{r['peak_rss_mb']:.0f} MB" if r.get("peak_rss_mb") else ""
            cells.append(f"{r['ms'] / batch:.0f} ms{rss}<br>{load}")
        def ok_ms(p):
            r = rr.get(p)
            return r["ms"] if r and r["status"] == "ok" else None
        peers32 = [m for m in (ok_ms("torch-fp32"), ok_ms("ort-fp32")) if m]
        bf, tf = ok_ms("tubelet-bf16"), ok_ms("tubelet-fp32")
        i8, oi8 = ok_ms("tubelet-int8"), ok_ms("ort-int8")
        s1 = f"{min(peers32) / bf:.2f}x" if peers32 and bf else "-"
        s2 = f"{tf / bf:.2f}x" if tf and bf else "-"
        s3 = f"{oi8 / i8:.2f}x" if i8 and oi8 else "-"
        L.append(f"| {arch} | {batch} | " + " | ".join(cells) + f" | {s1} | {s2} | {s3} |")
    L += ["", "ms per clip, peak RSS of the process, others' load (cores). The speed-up columns divide the "
          "best fp32 time of the peers (PyTorch, ONNX Runtime) by tubelet bf16's, tubelet's own fp32 time by "
          "its bf16 time, and ONNX Runtime int8's by tubelet int8's.", ""]
    if data.get("rss"):
        L += ["Peak RSS (MB, wait4) of a process that loads the model and runs one forward at batch 1 "
              "(`tubelet run`; PyTorch and ONNX Runtime: the child above with no timed calls, Python and "
              "the libraries included):", "", "| model | " + " | ".join(PEERS) + " |",
              "|---|" + "---|" * len(PEERS)]
        for arch in sorted({k.split()[0] for k in data["rss"]}):
            L.append(f"| {arch} | " + " | ".join(fmt(data["rss"].get(f"{arch} {p}"), ".0f")
                                                 for p in PEERS) + " |")
        L.append("")
    w = {(r["arch"], r["peer"]): r.get("linear_weight_mb") for r in rows if r["peer"].startswith("tubelet")}
    L += ["Weights of the linear layers (tubelet, MB): " + "; ".join(
        f"{arch} {fmt(w.get((arch, 'tubelet-fp32')), '.0f')} / {fmt(w.get((arch, 'tubelet-bf16')), '.0f')} / "
        f"{fmt(w.get((arch, 'tubelet-int8')), '.0f')}" for arch in sorted({r['arch'] for r in rows})) +
        " (fp32 / bf16 / int8).", ""]
    L += ["Accuracy on the random-weight models (batch 1): max |logit - PyTorch fp32 logit| (max |logit| "
          "in brackets; tubelet's reduced precisions also against tubelet fp32), and whether the top-1 class "
          "is PyTorch fp32's:", "",
          "| model | " + " | ".join(PEERS) + " |", "|---|" + "---|" * len(PEERS)]
    for arch, errs in sorted(data.get("logits", {}).items()):
        cells = []
        for p in PEERS:
            e = errs.get(p)
            if not e or "vs_torch_fp32" not in e:
                cells.append("-")
                continue
            c = f"{e['vs_torch_fp32']:.2g} ({e['max_abs_logit']:.2f})"
            if "vs_tubelet_fp32" in e and p != "tubelet-fp32":
                c += f"<br>vs tubelet fp32 {e['vs_tubelet_fp32']:.2g}"
            c += "<br>top-1 " + ("same" if e["top1_same_as_torch_fp32"] else "differs")
            cells.append(c)
        L.append(f"| {arch} | " + " | ".join(cells) + " |")
    m = data.get("motion")
    if m:
        L += ["", f"models/motion-vivit on {m['clips']} clips of the four move_* classes (`tubelet synth "
              f"--per-class {m['per_class']} --frames 8 --size 64 --seed {m['seed']} --distractors 0 --noise 0`, "
              "a seed it was not trained on; train and val splits together):", "",
              "| precision | accuracy | top-1 = fp32's | max \\|Δ top-1 probability\\| |", "|---|---|---|---|"]
        for prec in ("fp32", "bf16", "int8", "bf16-ref", "int8-ref"):
            if prec in m:
                r = m[prec]
                L.append(f"| {prec} | {r['accuracy']:.4f} | {r['agree_fp32']:.4f} | {r['max_score_diff']:.2g} |")
    if data.get("notes"):
        L += [""] + [f"- {n}" for n in data["notes"]]
    L += ["", C.DATA_PREFIX.replace("compare", "precision") + json.dumps({"rows": rows}) + " -->"]
    return BEGIN + "\n" + "\n".join(L) + "\n" + END


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", action="append", choices=list(C.ARCHS))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma_peak"),
                    help="build/fma_peak: the fp32 FMA peak, measured at the start of the run")
    ap.add_argument("--motion-per-class", type=int, default=100)
    ap.add_argument("--motion-seed", type=int, default=7)
    ap.add_argument("--no-motion", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--json", help="also write everything here")
    ap.add_argument("--render-json", help="measure nothing: rewrite --out from an earlier --json")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument("--max-other", type=float, default=0.3)
    ap.add_argument("--wait-idle", type=float, default=60)
    ap.add_argument("--_child")
    ap.add_argument("--job")
    ap.add_argument("--result")
    a = ap.parse_args()
    if a._child:
        return child_main(a)
    if a.render_json:
        with open(a.render_json) as f:
            C.write_results(a.out, render(json.load(f)), BEGIN, END)
        return 0

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    os.makedirs(OUT_DIR, exist_ok=True)
    archs = a.arch or list(C.ARCHS)
    peers = [p for p in a.peers.split(",") if p]
    data = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "threads": a.threads,
            "repeats": a.repeats, "machine": C.machine_info(), "versions": C.versions(), "rows": [],
            "logits": {}, "notes": []}
    log("fp32 FMA peak ...")
    data["fma_peak"] = C.fma_peak(a.fma_peak, a.threads)
    def save():  # after every model: a run cut short still leaves its numbers
        if a.json:
            with open(a.json, "w") as f:
                json.dump(data, f, indent=1)
        C.write_results(a.out, render(data), BEGIN, END)

    if not a.no_motion:
        data["motion"] = motion_eval(a, log)
    dirs = {}
    for arch in archs:
        dirs[arch] = TC.ensure_model(arch, TC.BASE[arch], log, a.timeout)
        dirs[arch] = (dirs[arch], ensure_onnx(arch, dirs[arch], log, a.timeout, "ort-int8" in peers)
                      if any(p.startswith(("ort", "ov")) for p in peers) else None)
    for batch in a.batch:  # every model at the first batch size first
        for arch in archs:
            model_dir, onnx = dirs[arch]
            for peer in peers:
                log(f"{arch} batch {batch} {peer} (load {C.loadavg()})")
                row = measure(peer, arch, batch, model_dir, onnx, a, log)
                log(f"  -> {row.get('ms', row.get('error'))}")
                data["rows"].append(row)
            if batch == 1:
                data["logits"][arch] = logit_errors(arch)
            save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
