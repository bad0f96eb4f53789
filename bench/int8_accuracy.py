#!/usr/bin/env python3
"""Static int8 accuracy: tubelet's dynamic and static int8 (each estimator) against OpenVINO's NNCF
static int8, calibrated on the SAME clips, measured on held-out clips. Accuracy only, no timing
(it is CPU-independent up to the kernels' summation order; run it anywhere).

Models (--arch):
  motion-vivit (default) a copy of models/motion-vivit (its int8_scales.json is written there
               and removed); calibration: its 8 example clips; test: held-out clips of a
               `tubelet synth` motion set with a seed the model never saw (the four move_*
               classes it knows)
  videomae-base, timesformer-base, vivit-base  precision.py's random-weight ViT-B (built once
               in bench/out/train-NAME), given a 224² preprocessor; calibration and test clips
               from two `tubelet synth` sets of other seeds, at the model's frame count
Every clip is preprocessed once by `tubelet preprocess` (for the runs and for NNCF); `tubelet
calibrate` preprocesses the calibration clips itself through the same code (tubelet_views_load,
default views): the same pixel_values.
Engines, each against its own fp32 of the same weights and against PyTorch fp32:
  tubelet      `tubelet run --precision fp32 | int8` (int8: dynamic without int8_scales.json,
               static after `tubelet calibrate [--percentile P]`)
  nncf         openvino.convert_model of the transformers model, nncf.quantize with the
               calibration clips (default settings, and model_type=TRANSFORMER), run on
               OpenVINO's CPU plugin in f32 inference precision
Metrics over the test clips: max |logit error|, mean |logit error|, top-1 agreement with fp32.

Usage: /work/venv/bin/python bench/int8_accuracy.py [--arch NAME] [--json OUT]  (bench/README.md)
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (the ViT-B configs)
import train_compare as TC  # noqa: E402  (their save_pretrained directories)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "bench", "out", "int8-accuracy")


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode:
        sys.exit(f"{' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def preprocess(tub, model, clips, out):
    xs = []
    for i, c in enumerate(clips):
        f = os.path.join(out, f"x{i}.npy")
        sh([tub, "preprocess", "--model", model, c, "-o", f])
        xs.append(np.load(f))
    return np.concatenate(xs).astype(np.float32)


def tubelet_logits(tub, model, x, prec, threads, work):
    xf, lf = os.path.join(work, "x.npy"), os.path.join(work, "l.npy")
    np.save(xf, x)
    sh([tub, "run", "--model", model, "--input", xf, "--logits", lf, "--precision", prec,
        "--threads", str(threads)])
    return np.load(lf)


def metrics(y, ref):
    return {"max_abs": float(np.abs(y - ref).max()), "mean_abs": float(np.abs(y - ref).mean()),
            "top1_agree": float((y.argmax(1) == ref.argmax(1)).mean())}


def nncf_logits(model_dir, cls, calib, test, work, threads):
    import nncf
    import openvino as ov
    import torch
    import transformers
    torch.set_num_threads(threads)
    tm = getattr(transformers, cls).from_pretrained(model_dir).eval()
    with torch.no_grad():
        ref = tm(torch.from_numpy(test)).logits.numpy()
    with torch.no_grad():  # OpenVINO's own PyTorch frontend (no ONNX file)
        graph = ov.convert_model(tm, example_input=torch.from_numpy(calib[:1]))
    core = ov.Core()
    cfg = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}

    def run(m):
        cm = core.compile_model(m, "CPU", cfg)
        return np.concatenate([cm(test[i:i + 1])[0] for i in range(len(test))])
    out = {"torch-fp32": ref, "ov-fp32": run(graph.clone())}
    data = nncf.Dataset([calib[i:i + 1] for i in range(len(calib))])
    out["nncf-int8"] = run(nncf.quantize(graph.clone(), data, subset_size=len(calib)))
    out["nncf-int8-transformer"] = run(nncf.quantize(graph.clone(), data,
                                                     subset_size=len(calib),
                                                     model_type=nncf.ModelType.TRANSFORMER))
    return out, nncf.__version__, ov.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arch", default="motion-vivit",
                    help="motion-vivit (default) or a random-weight ViT-B of precision.py: "
                    + ", ".join(TC.BASE))
    ap.add_argument("--calib-clips", type=int, default=8, help="ViT-B: calibration clips")
    ap.add_argument("--test-seed", type=int, default=424242)
    ap.add_argument("--test-per-class", type=int, default=4)
    ap.add_argument("--test-clips", type=int, default=16)
    ap.add_argument("--estimators", default="minmax,99.99",
                    help="tubelet calibrate estimators: minmax, or a percentile")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    tub = os.path.abspath(a.tubelet)
    if a.arch != "motion-vivit" and a.arch not in TC.BASE:
        sys.exit(f"--arch: motion-vivit or one of {', '.join(TC.BASE)}")
    os.makedirs(OUT_DIR, exist_ok=True)
    model = os.path.join(OUT_DIR, f"model-{a.arch}")
    shutil.rmtree(model, ignore_errors=True)
    mv = os.path.join(ROOT, "models", "motion-vivit")
    if a.arch == "motion-vivit":
        cls, frames, size = "VivitForVideoClassification", 8, 64
        shutil.copytree(mv, model, ignore=shutil.ignore_patterns("examples", "*.png",
                                                                 "int8_scales.json"))
        calib_clips = sorted(glob.glob(os.path.join(mv, "examples", "*.mp4")))
    else:  # random weights; motion clips at the model's size, its preprocessor at 224
        spec = TC.BASE[a.arch]
        cls, frames, size = spec["cls"], C.ARCHS[a.arch]["frames"], 224
        shutil.copytree(TC.ensure_model(a.arch, spec, print, 3600), model)
        with open(os.path.join(mv, "preprocessor_config.json")) as f:
            pc = json.load(f)
        pc["size"], pc["crop_size"] = {"shortest_edge": 224}, {"height": 224, "width": 224}
        with open(os.path.join(model, "preprocessor_config.json"), "w") as f:
            json.dump(pc, f)
        cal = os.path.join(OUT_DIR, f"calib-f{frames}")
        if not os.path.exists(os.path.join(cal, "val.csv")):
            sh([tub, "synth", "-o", cal, "--per-class", "1", "--frames", str(frames), "--size",
                "224", "--seed", "7", "--force"])
        calib_clips = sorted(glob.glob(os.path.join(cal, "**", "*.mp4"),
                                       recursive=True))[:a.calib_clips]
    synth = os.path.join(OUT_DIR, f"test-s{a.test_seed}-f{frames}-{size}")
    if not os.path.exists(os.path.join(synth, "val.csv")):
        sh([tub, "synth", "-o", synth, "--per-class", str(a.test_per_class), "--frames",
            str(frames), "--size", str(size), "--seed", str(a.test_seed), "--distractors", "0",
            "--noise", "0", "--force"])
    test_clips = sorted(c for c in glob.glob(os.path.join(synth, "**", "*.mp4"), recursive=True)
                        if os.path.basename(c).startswith("move_"))[:a.test_clips]
    work = os.path.join(OUT_DIR, f"work-{a.arch}")
    os.makedirs(work, exist_ok=True)
    calib = preprocess(tub, model, calib_clips, work)
    test = preprocess(tub, model, test_clips, work)
    logits = {"tubelet-fp32": tubelet_logits(tub, model, test, "fp32", a.threads, work),
              "tubelet-int8-dynamic": tubelet_logits(tub, model, test, "int8", a.threads, work)}
    scales = os.path.join(model, "int8_scales.json")
    for est in a.estimators.split(","):
        opt = [] if est == "minmax" else ["--percentile", est]
        sh([tub, "calibrate", "--model", model, "--threads", str(a.threads)] + opt + calib_clips)
        logits[f"tubelet-int8-static-{est}"] = tubelet_logits(tub, model, test, "int8", a.threads,
                                                              work)
        os.remove(scales)
    ov_out, nncf_v, ov_v = nncf_logits(model, cls, calib, test, work, a.threads)
    logits.update(ov_out)
    res = {"model": a.arch, "calibration_clips": len(calib),
           "test_clips": len(test), "test_seed": a.test_seed, "nncf": nncf_v, "openvino": ov_v,
           "rows": {}}
    top2 = np.sort(logits["torch-fp32"], axis=1)[:, -2:]
    res["fp32_top1_margin_min"] = float((top2[:, 1] - top2[:, 0]).min())
    for k, y in logits.items():
        own = logits["ov-fp32"] if k.startswith("nncf") else logits["tubelet-fp32"]
        res["rows"][k] = {"vs_own_fp32": metrics(y, own),
                          "vs_torch_fp32": metrics(y, logits["torch-fp32"])}
    print(f"calibration {len(calib)} clips, test {len(test)} clips; max |logit| "
          f"{np.abs(logits['torch-fp32']).max():.2f}, smallest fp32 top-1 margin "
          f"{res['fp32_top1_margin_min']:.4f}")
    print(f"{'engine':34s} {'max|err|':>9s} {'mean|err|':>9s} {'top1':>6s}   "
          "(against its own fp32)")
    for k, r in res["rows"].items():
        m = r["vs_own_fp32"]
        print(f"{k:34s} {m['max_abs']:9.4f} {m['mean_abs']:9.4f} {m['top1_agree']:6.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
