#!/usr/bin/env python3
"""Times one training step of tubelet against PyTorch (Hugging Face transformers, eager) on this
machine: same model (the same weights, from the same save_pretrained directory), same batch, same
thread count; with and without gradient checkpointing. Writes the comparison between
<!-- train:begin --> and <!-- train:end --> of bench/RESULTS.md (the rest of the file is kept; the
section is appended when the markers are missing).

One training step = forward + mean cross-entropy of the classifier logits (one label per logits row,
label 0) + backward into the parameter gradients. NO optimizer step on either side (`tubelet bench
--train` has none). The gradients persist across steps and are accumulated into on both sides (no
zero_grad between the steps), as `tubelet bench --train` does; dropout and drop path are 0.

  tubelet   `build/tubelet bench --model DIR --train [--checkpointing] --batch B --threads T
             --repeats R --warmup W --json` (input: pseudo-random pixels in [-1, 1))
  torch     a fresh Python process: torch.set_num_threads(T), set_num_interop_threads(1),
            XForVideoClassification.from_pretrained(DIR, dtype=float32), model.train() (every
            dropout probability checked to be 0), the model's default attention implementation
            (sdpa for VideoMAE and ViViT, eager for TimeSformer); input uniform in [-1, 1);
            checkpointing: model.activation_checkpointing_enable() (transformers 5.x; the deprecated
            gradient_checkpointing_enable() on older versions), non-reentrant torch.utils.checkpoint
            around every encoder layer

Each (model, batch, threads, checkpointing, peer) runs in its own process; peak RSS is that process's
(os.wait4), so it covers imports, loading and the steps. Times: median of R timed steps after W
warm-up steps. GFLOP/s counts model FLOPs, 3 x the forward FLOPs (`tubelet info`: 2 x multiply-adds
of all matmuls) per clip, for both peers and both modes (the recomputation under checkpointing is
not counted, so checkpointing shows as lower GFLOP/s).

Models (random weights, built from a config and saved with save_pretrained in bench/out/train-NAME/,
rebuilt when the config changes): videomae-base, timesformer-base, vivit-base as bench/compare.py
(published shapes, 400 labels); with --small, tiny configurations (32x32, 8 frames, hidden 96,
4 layers, 4 heads, patch 8): videomae-tiny, timesformer-tiny-{divided,joint,space_only}, vivit-tiny.

--check (default with --small) first compares, for each model, tubelet's loss and gradients
(`tubelet grad`) with PyTorch's for one batch in model.train() mode: it shows that both compute the
same thing (no dropout active on either side).

Usage:
  /work/venv/bin/python bench/train_compare.py [--models videomae-base,vivit-base] [--batch 2]
      [--threads 2] [--repeats 3] [--warmup 1] [--modes plain,checkpointed] [--peers tubelet,torch]
      [--out bench/RESULTS.md] [--json FILE] [--check]
  /work/venv/bin/python bench/train_compare.py --small        # quick smoke run, bench/out/train_small.md
"""
import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402  (shared: base configs, process/load helpers, the section writer)

ROOT = C.ROOT
OUT_DIR = os.path.join(ROOT, "bench", "out")
BEGIN, END = "<!-- train:begin -->", "<!-- train:end -->"
NO_DROP = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# mode: (gradient checkpointing, precision); bf16 = mixed precision on both sides: tubelet
# `bench --train --precision bf16` (f32 weights, bf16 products), PyTorch torch.autocast("cpu",
# dtype=torch.bfloat16) around the forward and the loss (the weights stay f32)
MODES = {"plain": (False, "fp32"), "checkpointed": (True, "fp32"), "bf16": (False, "bf16"),
         "frozen": (False, "fp32")}
# frozen: the probe's step over a frozen encoder (V-JEPA 2's evaluation protocol): tubelet `bench
# --train --freeze-encoder`; PyTorch with the base model's parameters requires_grad_(False) (the
# encoder: V-JEPA 2's vjepa2, VideoMAE's videomae), so autograd stops at its output
PEERS = ["tubelet", "torch"]


def _with_no_drop(spec):
    kw = dict(spec["kwargs"], **NO_DROP)
    if spec["cfg"] == "TimesformerConfig":
        kw["drop_path_rate"] = 0  # TimesformerConfig types it int in transformers 5.23 (0.0 is rejected)
    return dict(spec, kwargs=kw)


BASE = {name: _with_no_drop(spec) for name, spec in C.ARCHS.items()}
# V-JEPA 2 ViT-L's SSv2 classifier (facebook/vjepa2-vitl-fpc16-256-ssv2's shapes: 16 frames of 256²,
# an attentive probe of 3 + 1 blocks, 174 classes); its input is pixel_values_videos
_VJ = dict(cls="VJEPA2ForVideoClassification", cfg="VJEPA2Config", input="pixel_values_videos")
BASE["vjepa2-vitl-ssv2"] = _with_no_drop(dict(_VJ, frames=16, kwargs=dict(
    crop_size=256, frames_per_clip=16, num_labels=174, attention_dropout=0.0, drop_path_rate=0.0)))
_TINY = dict(image_size=32, num_channels=3, num_frames=8, hidden_size=96, num_hidden_layers=4,
             num_attention_heads=4, intermediate_size=384, num_labels=400)
_TS = dict(cls="TimesformerForVideoClassification", cfg="TimesformerConfig", frames=8)
SMALL = {name: _with_no_drop(spec) for name, spec in {
    "videomae-tiny": dict(cls="VideoMAEForVideoClassification", cfg="VideoMAEConfig", frames=8,
                          kwargs=dict(_TINY, patch_size=8, tubelet_size=2, use_mean_pooling=True)),
    **{f"timesformer-tiny-{short}": dict(_TS, kwargs=dict(_TINY, patch_size=8, attention_type=attn))
       for short, attn in (("divided", "divided_space_time"), ("joint", "joint_space_time"),
                           ("space_only", "space_only"))},
    "vivit-tiny": dict(cls="VivitForVideoClassification", cfg="VivitConfig", frames=8,
                       kwargs=dict(_TINY, tubelet_size=[2, 8, 8])),
    "vjepa2-tiny": dict(_VJ, frames=8, kwargs=dict(
        crop_size=32, patch_size=8, frames_per_clip=8, hidden_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_pooler_layers=1, pred_hidden_size=32, pred_num_attention_heads=2,
        pred_num_hidden_layers=1, num_labels=400, attention_dropout=0.0, drop_path_rate=0.0)),
}.items()}


def input_shape(spec, batch):
    kw = spec["kwargs"]
    side = kw.get("image_size", kw.get("crop_size"))
    return (batch, spec["frames"], kw.get("num_channels", kw.get("in_chans", 3)), side, side)


# ---------------------------------------------------------------------------------------------
# children (run as `train_compare.py --_child MODE --job FILE --result FILE`)


def rss_now_mb():
    try:
        with open("/proc/self/status") as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return None


def maxrss_self_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_mkmodel(job):
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = getattr(transformers, job["cfg"])(**job["kwargs"])
    model = getattr(transformers, job["cls"])(cfg).eval()
    tmp = job["model_dir"] + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.rmtree(job["model_dir"], ignore_errors=True)
    os.rename(tmp, job["model_dir"])
    return {}


def load_train_model(job):
    """The model from job["model_dir"] in train mode; raises if any dropout is active."""
    import torch
    import transformers
    torch.set_num_threads(job["threads"])
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    transformers.utils.logging.disable_progress_bar()
    model = getattr(transformers, job["cls"]).from_pretrained(job["model_dir"], dtype=torch.float32)
    model.train()
    active = [f"{n}: p={m.p}" for n, m in model.named_modules()
              if isinstance(m, torch.nn.Dropout) and m.p > 0]
    active += [f"{n}: drop_prob={m.drop_prob}" for n, m in model.named_modules()
               if "DropPath" in type(m).__name__ and getattr(m, "drop_prob", 0) > 0]
    cfg = model.config
    for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
        if getattr(cfg, k, 0) not in (0, 0.0, None):
            active.append(f"config.{k}={getattr(cfg, k)}")
    if active:
        raise RuntimeError("dropout active in train mode: " + "; ".join(active[:5]))
    return model


def make_pixels(shape, seed=0):
    import numpy as np
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)


def enable_checkpointing(model):
    """Returns (how, layers checkpointed, layers) or raises ValueError when unsupported."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(model).__name__}.supports_gradient_checkpointing is False")
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable()
        how = "activation_checkpointing_enable()"
    else:
        model.gradient_checkpointing_enable()
        how = "gradient_checkpointing_enable()"
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    on = sum(1 for m in layers if m.gradient_checkpointing)
    if not on:
        raise ValueError(f"{how} checkpointed no layer of {type(model).__name__}")
    return how, on, len(layers)


def child_step(job):
    import torch
    import torch.nn.functional as F
    import transformers
    res = {"rss_after_import_mb": rss_now_mb(), "torch": torch.__version__,
           "transformers": transformers.__version__}
    t0 = time.time()
    model = load_train_model(job)
    res.update(load_s=time.time() - t0, rss_after_load_mb=rss_now_mb(), maxrss_after_load_mb=maxrss_self_mb(),
               attn_impl=getattr(model.config, "_attn_implementation", None) or "eager",
               torch_threads=torch.get_num_threads())
    if job.get("frozen"):
        getattr(model, model.base_model_prefix).requires_grad_(False)
    if job["checkpointing"]:
        try:
            how, on, n = enable_checkpointing(model)
        except ValueError as e:
            return {"unsupported": True, "error": str(e)}
        res.update(checkpointing=how, checkpointed_layers=f"{on}/{n}")
    # counts the runs of a submodule of the first encoder layer: 2 per step when checkpointing
    # recomputes the layer (transformers 5.x checkpoints the layer's forward, not its __call__, so
    # the layer's own hooks run once)
    from transformers.modeling_layers import GradientCheckpointingLayer
    layer = next((m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)), None)
    first = None if layer is None else next(
        (c for c in layer.children() if any(True for _ in c.parameters())), None)
    layer_runs = [0]
    if first is not None:
        first.register_forward_hook(lambda *_: layer_runs.__setitem__(0, layer_runs[0] + 1))
    x = torch.from_numpy(make_pixels(job["shape"]))
    losses = []

    import contextlib
    cast = (torch.autocast("cpu", dtype=torch.bfloat16) if job.get("precision") == "bf16"
            else contextlib.nullcontext())

    def step():
        with cast:
            logits = model(**{job.get("input", "pixel_values"): x}).logits
            loss = F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long))
        loss.backward()
        losses.append(loss.item())

    ms, other = C.timed_repeats(step, job["repeats"], job["warmup"], job["tries"],
                                C.allowed_other(job["max_other"], job["threads"]), job["wait_idle"])
    params = list(model.parameters())
    res.update(ms=ms, other_load=other, loss_first=losses[0], maxrss_self_mb=maxrss_self_mb(),
               layer0_runs_per_step=layer_runs[0] / len(losses) if first is not None else None,
               params_with_grad=f"{sum(p.grad is not None for p in params)}/{len(params)}")
    return res


def child_check(job):
    """tubelet grad vs PyTorch autograd (train mode) on one batch: loss and per-tensor gradients."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    model = load_train_model(job)
    x = make_pixels(job["shape"], seed=1)
    logits = model(**{job.get("input", "pixel_values"): torch.from_numpy(x)}).logits
    y = (np.arange(logits.shape[0]) * 7 % logits.shape[1]).astype(np.int64)
    loss = F.cross_entropy(logits, torch.from_numpy(y))
    loss.backward()
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "y.npy"), y)
        g_path = os.path.join(d, "g.safetensors")
        p = subprocess.run([job["tubelet"], "grad", "--model", job["model_dir"], "--input",
                            os.path.join(d, "x.npy"), "--labels", os.path.join(d, "y.npy"), "-o", g_path,
                            "--threads", str(job["threads"])], capture_output=True, text=True,
                           timeout=job["timeout"])
        if p.returncode:
            raise RuntimeError(f"tubelet grad: exit status {p.returncode}: {p.stderr[-500:]}")
        t_loss = float([ln for ln in p.stdout.splitlines() if ln.startswith("loss")][-1].split()[1])
        g = load_file(g_path)
    ref = {n: q.grad for n, q in model.named_parameters() if q.grad is not None}
    try:  # the checkpoint's names (tubelet's), as save_pretrained writes them (transformers 5 renames)
        from transformers.core_model_loading import revert_weight_conversion
        ref = revert_weight_conversion(model, ref)
    except ImportError:
        pass
    gmax = max(float(v.abs().max()) for v in ref.values())
    worst, worst_name, matched = 0.0, None, 0
    for n, gr in ref.items():
        if n not in g or tuple(g[n].shape) != tuple(gr.shape):
            continue
        matched += 1
        # the test's rule (tests/test_grads.c): relative to the tensor's max, floored at 1e-4 x the model's
        err = float((g[n] - gr).abs().max()) / max(float(gr.abs().max()), 1e-4 * gmax)
        if err > worst:
            worst, worst_name = err, n
    return {"loss_torch": float(loss), "loss_tubelet": t_loss, "grad_tensors": f"{matched}/{len(ref)}",
            "grad_worst_rel": worst, "grad_worst_name": worst_name}


def child_main(a):
    with open(a.job) as f:
        job = json.load(f)
    fn = {"mkmodel": child_mkmodel, "step": child_step, "check": child_check}[a._child]
    return C.write_child_result(a.result, fn, job)


# ---------------------------------------------------------------------------------------------
# parent


def run_py_child(mode, job, timeout):
    """Runs a child of this script in its own process (compare.run_job_child)."""
    return C.run_job_child(__file__, mode, job, timeout)


def ensure_model(name, spec, log, timeout):
    d = os.path.join(OUT_DIR, f"train-{name}")
    side = os.path.join(d, "bench_source.json")
    want = {"cls": spec["cls"], "cfg": spec["cfg"], "kwargs": spec["kwargs"], "seed": 0}
    if C.model_is_current(d, want):
        return d
    log(f"building {os.path.relpath(d, ROOT)} (random weights, save_pretrained)")
    os.makedirs(OUT_DIR, exist_ok=True)
    res, _ = run_py_child("mkmodel", dict(want, model_dir=d, threads=2), timeout)
    if not res.get("ok"):
        raise RuntimeError(f"building {name} failed: {res.get('error')}")
    with open(side, "w") as f:
        json.dump(want, f)
    return d


def forward_gflop(tubelet, model_dir, name):
    """Forward GFLOP per clip from `tubelet info --json`; compare.py's analytic count as fallback."""
    try:
        p = subprocess.run([tubelet, "info", "--model", model_dir, "--json"], capture_output=True,
                           text=True, timeout=120)
        return float(json.loads(p.stdout)["gflop_per_clip"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return C.flops_per_clip(name)["total"] if name in C.ARCHS else None


def measure(peer, name, spec, model_dir, batch, threads, mode, a):
    ckpt, precision = MODES[mode]
    frozen = mode == "frozen"
    row = {"model": name, "batch": batch, "threads": threads, "mode": mode, "peer": peer, "status": "ok",
           "notes": [], "date": datetime.datetime.now().isoformat(timespec="seconds")}
    C.wait_idle(a.wait_idle, C.allowed_other(a.max_other, threads))
    row["loadavg_before"] = C.loadavg()
    if peer == "tubelet":
        if not (os.path.isfile(a.tubelet) and os.access(a.tubelet, os.X_OK)):
            row.update(status="skipped", error=f"{a.tubelet} not found (build tubelet first)")
            return row
        cmd = ([a.tubelet, "bench", "--model", model_dir, "--train"] + (["--checkpointing"] if ckpt else [])
               + (["--freeze-encoder"] if frozen else [])
               + (["--precision", precision] if precision != "fp32" else [])
               + ["--batch", str(batch), "--threads", str(threads), "--repeats", str(a.repeats),
                  "--warmup", str(a.warmup), "--json"])
        row["command"] = " ".join(shlex.quote(os.path.relpath(c, ROOT) if os.path.isabs(c) else c)
                                  for c in cmd)
        r = C.run_child(cmd, a.timeout, env=C.child_env(threads))
        if r["rc"] != 0:
            why = "timed out" if r["timed_out"] else f"exit status {r['rc']}"
            row.update(status="failed", error=f"{why}: {(r['stderr'] or r['stdout'])[-800:]}")
            return row
        try:
            j = C.parse_tubelet_json(r["stdout"])
        except ValueError as e:
            row.update(status="failed", error=f"{e}; output: {r['stdout'][-400:]}")
            return row
        want_mode = "train-frozen" if frozen else "train-checkpointed" if ckpt else "train"
        if j.get("mode") != want_mode or j.get("precision", "fp32") != precision:
            row.update(status="failed",
                       error=f"tubelet bench reports mode {j.get('mode')!r} in {j.get('precision')!r}, "
                             f"not {want_mode!r} in {precision!r}")
            return row
        row.update(tubelet_json=j, ms_median=float(j["ms_median"]), ms_min=j.get("ms_min"),
                   other_load=r["other_load_lifetime"], peak_rss_self_mb=j.get("peak_rss_mb"),
                   activation_mb=j.get("activation_mb"), gemm=j.get("gemm"))
        if int(j["threads"]) != threads:
            row["notes"].append(f"tubelet ran {j['threads']} threads")
    else:
        job = {"model_dir": model_dir, "cls": spec["cls"], "threads": threads, "checkpointing": ckpt,
               "precision": precision, "frozen": frozen, "input": spec.get("input", "pixel_values"),
               "shape": input_shape(spec, batch), "repeats": a.repeats, "warmup": a.warmup, "tries": a.tries,
               "max_other": a.max_other, "wait_idle": a.wait_idle}
        res, r = run_py_child("step", job, a.timeout)
        if res.get("unsupported"):
            row.update(status="unsupported", error=res.get("error"))
            return row
        if not res.get("ok"):
            row.update(status="timeout" if r["timed_out"] else "failed", error=res.get("error", "?"))
            return row
        ms = res["ms"]
        row.update(ms_all=[round(v, 2) for v in ms], ms_median=statistics.median(ms), ms_min=min(ms),
                   other_load=res["other_load"], peak_rss_self_mb=res["maxrss_self_mb"],
                   rss_after_import_mb=res["rss_after_import_mb"], rss_after_load_mb=res["rss_after_load_mb"],
                   attn_impl=res["attn_impl"], params_with_grad=res["params_with_grad"],
                   checkpointing_how=res.get("checkpointing"),
                   checkpointed_layers=res.get("checkpointed_layers"),
                   layer0_runs_per_step=res.get("layer0_runs_per_step"),
                   versions={"torch": res["torch"], "transformers": res["transformers"]})
        if ckpt and res.get("layer0_runs_per_step") is not None and res["layer0_runs_per_step"] < 2:
            row["notes"].append(f"layer 0 ran {res['layer0_runs_per_step']:g}x per step: not recomputed?")
        if res["maxrss_after_load_mb"] >= res["maxrss_self_mb"] - 1:
            row["notes"].append("peak RSS reached while loading")
        if len(ms) > 1 and max(ms) - min(ms) > 0.15 * row["ms_median"]:
            row["notes"].append(f"spread {min(ms):.0f}-{max(ms):.0f} ms")
    row.update(peak_rss_mb=r["peak_rss_mb"], wall_s=r["wall_s"])
    if row["other_load"] is not None and row["other_load"] > C.allowed_other(a.max_other, threads):
        row["notes"].append(f"machine busy ({row['other_load']:.2f} cores used by others)")
    return row


def fmt(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def render(data):
    rows, a = data["rows"], data["args"]
    L = [BEGIN, "", "## Training step: tubelet vs PyTorch" + (" (small configurations, smoke test)"
                                                               if a["small"] else ""), ""]
    L.append(f"Generated by `bench/train_compare.py` on {data['date']} ({data['wall_s'] / 60:.1f} min): "
             f"`{data['command']}`")
    L.append("")
    m, v = data["machine"], data["versions"]
    L.append(f"- Machine: {m.get('model')}, {m.get('cpus')} CPUs, {m.get('mem_gb')} GB RAM; "
             f"load average before {data['loadavg_before']}, after {data['loadavg_after']}")
    L.append("- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()
                                        if val and k in ("python", "torch", "transformers", "numpy"))
             + (f"; tubelet GEMM: {data['gemm']}" if data.get("gemm") else ""))
    L.append("- Step: forward + mean cross-entropy of the logits (label 0 for every logits row) + backward "
             "into the parameter gradients, which persist and are accumulated into (no zero_grad); **no "
             "optimizer step** on either side. Dropout / drop path 0 on both sides (PyTorch in "
             "`model.train()`, every dropout module checked to be p = 0). Same weights (one save_pretrained "
             "directory per model), fp32 (mode bf16: mixed precision, tubelet `--precision bf16`, PyTorch "
             "`torch.autocast('cpu', dtype=torch.bfloat16)` around forward and loss; f32 weights on both sides), "
             "random input in [-1, 1).")
    L.append(f"- Method: {a['warmup']} warm-up step(s), then the median of {a['repeats']} timed steps; each "
             "(model, batch, threads, checkpointing, peer) in a fresh process whose peak RSS (wait4) covers "
             "imports, loading and the steps. tubelet: `tubelet bench --model DIR --train [--checkpointing] "
             "--json`. PyTorch: eager, `torch.set_num_threads(T)`, interop threads 1, the model's default "
             "attention; checkpointing with `" + (data.get("ckpt_how") or "activation_checkpointing_enable()")
             + "` (non-reentrant `torch.utils.checkpoint` per encoder layer).")
    L.append("- GFLOP/s = 3 x forward GFLOP/clip (analytic, `tubelet info`) x clips/s for every row: model "
             "FLOPs, the recomputed forward under checkpointing not counted.")
    if data.get("ckpt_support"):
        L.append(f"- Hugging Face gradient checkpointing (transformers {v.get('transformers')}): "
                 + "; ".join(f"{k}: {s}" for k, s in data["ckpt_support"].items()))
    L.append("")
    if data.get("checks"):
        L.append("Same computation (`--check`: `tubelet grad` against PyTorch autograd in train mode, one "
                 "batch; gradient error per tensor relative to its max, floored at 1e-4 x the model's max, "
                 "the rule of tests/test_grads.c):")
        L.append("")
        L.append("| model | batch | loss PyTorch | loss tubelet | tensors compared | worst gradient error |")
        L.append("|---|---|---|---|---|---|")
        for name, c in data["checks"].items():
            if c.get("ok"):
                L.append(f"| {name} | {c['batch']} | {c['loss_torch']:.6f} | {c['loss_tubelet']:.6f} | "
                         f"{c['grad_tensors']} | {c['grad_worst_rel']:.1e} ({c['grad_worst_name']}) |")
            else:
                L.append(f"| {name} | {c.get('batch', '')} | failed: "
                         f"{(c.get('error') or '').replace('|', '/').replace(chr(10), ' ')[:200]} | | | |")
        L.append("")
    L.append("Results (ms/step = median wall time of one step of the whole batch; speed-up = PyTorch ms / "
             "tubelet ms; RSS ratio = PyTorch peak RSS / tubelet peak RSS; other load = cores used by other "
             "processes meanwhile):")
    L.append("")
    L.append("| model | batch | threads | mode | peer | ms/step | clips/s | GFLOP/s | peak RSS MB | "
             "tubelet speed-up | RSS ratio | other load | notes |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    tub = {(r["model"], r["batch"], r["threads"], r["mode"]): r for r in rows
           if r["peer"] == "tubelet" and r["status"] == "ok"}
    for r in rows:
        head = f"| {r['model']} | {r['batch']} | {r['threads']} | {r['mode']} | {r['peer']} |"
        if r["status"] != "ok":
            L.append(f"{head} {r['status']} | | | | | | | "
                     f"{(r.get('error') or '').replace('|', '/').replace(chr(10), ' ')[:300]} |")
            continue
        notes = list(r.get("notes", []))
        if r["peer"] == "tubelet" and r.get("activation_mb") is not None:
            notes.insert(0, f"activations {r['activation_mb']:.0f} MB")
        if r["peer"] == "torch" and r.get("rss_after_load_mb") is not None:
            notes.insert(0, f"RSS after import {r['rss_after_import_mb']:.0f} MB, after load "
                            f"{r['rss_after_load_mb']:.0f} MB; attention {r.get('attn_impl')}")
        t = tub.get((r["model"], r["batch"], r["threads"], r["mode"]))
        sp = rr = "-"
        if r["peer"] != "tubelet":
            sp, rr = ("n/a", "n/a") if t is None else (f"{r['ms_median'] / t['ms_median']:.2f}x",
                                                       f"{r['peak_rss_mb'] / t['peak_rss_mb']:.2f}")
        L.append(f"{head} {r['ms_median']:.1f} | {r['clips_per_s']:.2f} | {fmt(r.get('gflops'), '.1f')} | "
                 f"{r['peak_rss_mb']:.0f} | {sp} | {rr} | {fmt(r.get('other_load'), '.2f')} | "
                 f"{'; '.join(notes)} |")
    # checkpointing: what it costs and saves, per peer
    ok = {(r["model"], r["batch"], r["threads"], r["peer"], r["mode"]): r
          for r in rows if r["status"] == "ok"}
    ck = []
    for (mo, b, t, p, mode), r in ok.items():
        plain = ok.get((mo, b, t, p, "plain"))
        if mode == "checkpointed" and plain:
            ck.append(f"| {mo} | {b} | {t} | {p} | {r['ms_median'] / plain['ms_median']:.2f}x | "
                      f"{plain['peak_rss_mb']:.0f} -> {r['peak_rss_mb']:.0f} MB "
                      f"({100 * (r['peak_rss_mb'] / plain['peak_rss_mb'] - 1):+.0f} %) |")
    if ck:
        L += ["", "Gradient checkpointing, with against without (step time ratio; peak RSS):", "",
              "| model | batch | threads | peer | step time | peak RSS |", "|---|---|---|---|---|---|"] + ck
    mp = []
    for (mo, b, t, p, mode), r in ok.items():
        plain = ok.get((mo, b, t, p, "plain"))
        if mode == "bf16" and plain:
            mp.append(f"| {mo} | {b} | {t} | {p} | {plain['ms_median'] / r['ms_median']:.2f}x | "
                      f"{plain['peak_rss_mb']:.0f} -> {r['peak_rss_mb']:.0f} MB |")
    if mp:
        L += ["", "Mixed precision (bf16) against fp32, per peer (speed-up = fp32 ms / bf16 ms):", "",
              "| model | batch | threads | peer | speed-up | peak RSS |", "|---|---|---|---|---|---|"] + mp
    if data.get("notes"):
        L += ["", "Notes:", ""] + [f"- {n}" for n in data["notes"]]
    L += ["", END]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="tiny configurations (a quick smoke run)")
    ap.add_argument("--models", action="append",
                    help="comma list, repeatable; default: all of the set (base, or tiny with --small)")
    ap.add_argument("--batch", type=int, nargs="+", default=[2])
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--repeats", type=int, help="timed steps (default 3; 10 with --small)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (default 1; 3 with --small)")
    ap.add_argument("--modes", default="plain,checkpointed",
                    help="comma list of plain, checkpointed, bf16 (mixed precision), frozen (the "
                         "probe over a frozen encoder)")
    ap.add_argument("--peers", default="tubelet,torch", help="comma list of tubelet, torch")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction,
                    help="compare tubelet grad with PyTorch autograd first (default: on with --small)")
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--out",
                    help="Markdown file (default bench/RESULTS.md; bench/out/train_small.md with --small)")
    ap.add_argument("--json", help="also write everything as JSON here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    ap.add_argument("--tries", type=int, default=2,
                    help="PyTorch: redo the timed steps up to this often while others load the machine")
    ap.add_argument("--max-other", type=float, default=0.3)
    ap.add_argument("--wait-idle", type=float, default=60,
                    help="before each process, wait up to this many s for other load <= --max-other")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._child:
        return child_main(a)

    registry = SMALL if a.small else BASE
    names = [n.strip() for m in (a.models or [",".join(registry)]) for n in m.split(",") if n.strip()]
    for n in names:
        if n not in registry:
            ap.error(f"unknown model {n!r}; choose from {', '.join(registry)}"
                     + ("" if a.small else " (tiny ones need --small)"))
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    if any(m not in MODES for m in modes) or any(p not in PEERS for p in peers):
        ap.error("--modes takes plain, checkpointed, bf16, frozen; --peers takes tubelet, torch")
    a.repeats = a.repeats or (10 if a.small else 3)
    a.warmup = a.warmup if a.warmup is not None else (3 if a.small else 1)
    check = a.small if a.check is None else a.check
    out = a.out or (os.path.join(ROOT, "bench", "out", "train_small.md") if a.small
                    else os.path.join(ROOT, "bench", "RESULTS.md"))
    have_tubelet = os.path.isfile(a.tubelet) and os.access(a.tubelet, os.X_OK)

    def log(msg):
        print(msg, flush=True)

    t_start = time.time()
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "bench/train_compare.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
            "args": {"small": a.small, "models": names, "batch": a.batch, "threads": a.threads,
                     "repeats": a.repeats, "warmup": a.warmup, "modes": modes, "peers": peers,
                     "max_other": a.max_other, "tries": a.tries, "wait_idle": a.wait_idle},
            "machine": C.machine_info(), "versions": C.versions(), "loadavg_before": C.loadavg(),
            "models": {}, "checks": {}, "ckpt_support": {}, "notes": [], "rows": []}
    log(f"train_compare.py: models {names}, batch {a.batch}, threads {a.threads}, modes {modes}, "
        f"peers {peers}, {a.warmup} warm-up + {a.repeats} timed steps")
    log(f"machine: {data['machine'].get('model')}; load average {data['loadavg_before']}")
    if not have_tubelet:
        data["notes"].append(f"tubelet skipped: {a.tubelet} not found (build it first)")

    for n in names:
        spec = registry[n]
        d = ensure_model(n, spec, log, a.timeout)
        g = forward_gflop(a.tubelet, d, n) if have_tubelet else (
            C.flops_per_clip(n)["total"] if n in C.ARCHS else None)
        data["models"][n] = {"dir": os.path.relpath(d, ROOT), "cls": spec["cls"], "config": spec["kwargs"],
                             "forward_gflop_per_clip": g}
        log(f"{n}: {os.path.relpath(d, ROOT)}, {fmt(g, '.3f')} forward GFLOP/clip")
        if check and have_tubelet:
            B, T = a.batch[0], a.threads[0]
            res, _ = run_py_child("check", {"model_dir": d, "cls": spec["cls"], "threads": T,
                                            "input": spec.get("input", "pixel_values"),
                                            "shape": input_shape(spec, B), "tubelet": a.tubelet,
                                            "timeout": a.timeout}, a.timeout)
            res["batch"] = B
            data["checks"][n] = res
            if res.get("ok"):
                log(f"  check: loss torch {res['loss_torch']:.6f} tubelet {res['loss_tubelet']:.6f}, "
                    f"grads {res['grad_tensors']} tensors, worst rel. error {res['grad_worst_rel']:.1e}")
                if abs(res["loss_torch"] - res["loss_tubelet"]) > 1e-4 * max(1, abs(res["loss_torch"])) \
                        or res["grad_worst_rel"] > 1e-3 or len(set(res["grad_tensors"].split("/"))) != 1:
                    data["notes"].append(f"{n}: tubelet and PyTorch disagree (see the check table)")
            else:
                log(f"  check failed: {res.get('error', '')[:300]}")

    for n in names:
        spec, d = registry[n], os.path.join(ROOT, data["models"][n]["dir"])
        g = data["models"][n]["forward_gflop_per_clip"]
        for T in a.threads:
            for B in a.batch:
                for mode in modes:
                    for peer in peers:
                        t0 = time.time()
                        log(f"{n} batch {B} threads {T} {mode} {peer} ...")
                        row = measure(peer, n, spec, d, B, T, mode, a)
                        if row["status"] == "ok":
                            row["clips_per_s"] = B / (row["ms_median"] / 1e3)
                            row["gflops"] = 3 * g * row["clips_per_s"] if g else None
                            log(f"  {row['ms_median']:.1f} ms/step, {row['clips_per_s']:.2f} clips/s, "
                                f"{fmt(row['gflops'], '.1f')} GFLOP/s, peak RSS {row['peak_rss_mb']:.0f} MB "
                                f"({time.time() - t0:.0f} s)")
                        else:
                            log(f"  {row['status']}: {(row.get('error') or '')[:300]}")
                        if peer == "torch" and MODES[mode][0]:
                            fam = spec["cls"].replace("ForVideoClassification", "")
                            if row["status"] == "ok":
                                data["ckpt_how"] = row.get("checkpointing_how")
                                runs = row.get("layer0_runs_per_step")
                                data["ckpt_support"][fam] = (
                                    f"yes ({row.get('checkpointed_layers')} layers checkpointed"
                                    + (f"; layer 0 runs {runs:g}x per step)" if runs else ")"))
                            elif row["status"] == "unsupported":
                                data["ckpt_support"][fam] = f"NOT supported ({row.get('error')})"
                        if peer == "tubelet" and row.get("gemm"):
                            data["gemm"] = row["gemm"]
                        data["rows"].append(row)
    for fam, s in data["ckpt_support"].items():
        log(f"HF gradient checkpointing, {fam}: {s}")
    data["loadavg_after"] = C.loadavg()
    data["wall_s"] = time.time() - t_start
    C.write_results(out, render(data), BEGIN, END)
    shown = os.path.relpath(out, ROOT) if os.path.abspath(out).startswith(ROOT + os.sep) else out
    log(f"wrote {shown} ({data['wall_s'] / 60:.1f} min)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
