#!/usr/bin/env python3
"""Times the same video transformers in PyTorch, ONNX Runtime and tubelet on this machine, in one run,
and writes the comparison into bench/RESULTS.md (between <!-- compare:begin --> and
<!-- compare:end -->; the rest of the file is kept).

Architectures (random weights, built from a config: no downloads):
  videomae-base     VideoMAEForVideoClassification, 224^2, 16 frames, tubelet 2, mean pooling
  timesformer-base  TimesformerForVideoClassification, 224^2, 8 frames, divided space-time
  vivit-base        VivitForVideoClassification, 224^2, 32 frames, tubelet (2, 16, 16)
all ViT-B (hidden 768, 12 layers, 12 heads, MLP 3072), 400 labels. Only when named with --arch,
V-JEPA 2 ViT-L (hidden 1024, 24 layers, 16 heads, MLP 4096, tubelet (2, 16, 16), 3D RoPE, no cls):
  vjepa2-vitl-16x256       VJEPA2Model (the encoder, forward(skip_predictor=True),
                           last_hidden_state), 16 frames x 256^2 = 2,048 tokens
  vjepa2-vitl-64x256       the same at 64 frames x 256^2 = 8,192 tokens
  vjepa2-vitl-ssv2-16x256  VJEPA2ForVideoClassification (attentive pooler 3 + 1 blocks, 174 labels,
                           logits), 16 frames x 256^2
input pixel_values_videos (B, T, 3, 256, 256); tubelet runs `bench --arch vjepa2-vitl-256` (or
vjepa2-vitl-ssv2) `--frames T --size 256`.

Peers, each run in its own subprocess (peak RSS per peer from os.wait4; model loaded once, input
already in memory, warm-up excluded, median of the repeats):
  torch-eager    PyTorch fp32, eval, torch.inference_mode(), torch.set_num_threads(T), the model's
                 default attention implementation (sdpa where the model supports it)
  torch-compile  the same under torch.compile (CPU inductor); the compile time is reported
  ort            ONNX Runtime CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads=T,
                 inter_op_num_threads=1; the model is exported once with torch.onnx.export (opset 17,
                 TorchScript exporter first, dynamo exporter as fallback) and cached in bench/out/
  openvino       OpenVINO CPU plugin on the same exported ONNX graph: PERFORMANCE_HINT=LATENCY,
                 NUM_STREAMS=1, INFERENCE_NUM_THREADS=T, INFERENCE_PRECISION_HINT=f32 (bench/precision.py
                 runs its bf16 and int8)
  tubelet        `<tubelet> bench --arch NAME --batch B --threads T --json`, which prints one JSON
                 object with at least arch, batch, threads, ms_median, gflop_per_clip, gflops_per_s,
                 peak_rss_mb (ms_median is per forward call of the whole batch)

FLOPs per clip are computed analytically (2 x multiply-adds of every matmul: linear layers, attention
QK^T and AV, patch embedding, classifier; normalisation, softmax, GELU and residual adds are not
counted) so GFLOP/s is comparable across peers.

The machine is shared: each peer first waits (up to --wait-idle seconds) for other processes to go
quiet, and the CPU time others used during the timed repeats is recorded ("other load", in cores);
when it exceeds --max-other (plus the cores the peer leaves free) the repeats are redone (up to
--tries times), keeping the least disturbed.

Usage:
  /work/venv/bin/python bench/compare.py [--arch NAME ...] [--batch 1 4] [--threads 2]
      [--repeats 5] [--warmup 1] [--tubelet build/tubelet] [--peers torch,ort,openvino,tubelet]
      [--out bench/RESULTS.md] [--json out.json] [--no-compile] [--merge]
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
DATA_PREFIX = "<!-- compare:data "

VIT_B = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
ARCHS = {
    "videomae-base": dict(
        cls="VideoMAEForVideoClassification", cfg="VideoMAEConfig", frames=16,
        kwargs=dict(image_size=224, patch_size=16, num_channels=3, num_frames=16, tubelet_size=2,
                    use_mean_pooling=True, num_labels=400, **VIT_B)),
    "timesformer-base": dict(
        cls="TimesformerForVideoClassification", cfg="TimesformerConfig", frames=8,
        kwargs=dict(image_size=224, patch_size=16, num_channels=3, num_frames=8,
                    attention_type="divided_space_time", num_labels=400, **VIT_B)),
    "vivit-base": dict(
        cls="VivitForVideoClassification", cfg="VivitConfig", frames=32,
        kwargs=dict(image_size=224, num_channels=3, num_frames=32, tubelet_size=[2, 16, 16],
                    num_labels=400, **VIT_B)),
}
# V-JEPA 2 ViT-L (issue 38), only when asked for with --arch: transformers' VJEPA2Model (the
# encoder; the fair comparison of the backbone: forward(skip_predictor=True), output
# last_hidden_state) at the published vjepa2-vitl-fpc64-256 config, at 16 and 64 frames of 256^2,
# and the SSv2 classifier (vjepa2-vitl-fpc16-256-ssv2: attentive pooler of 3 self-attention blocks
# + 1 cross-attention block, 174 labels) at 16 frames. Input pixel_values_videos (B, T, 3, S, S).
# tubelet runs `bench --arch TUBELET_ARCH --frames T --size S`. The backbone's RoPE positions
# depend on crop_size // patch_size only, so frames_per_clip 64 serves both frame counts, as in
# tubelet's vjepa2-vitl-256 preset.
VIT_L = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, mlp_ratio=4.0)
VJEPA2_VITL = dict(crop_size=256, patch_size=16, tubelet_size=2, in_chans=3, **VIT_L)
VJEPA2_ARCHS = {
    "vjepa2-vitl-16x256": dict(
        cls="VJEPA2Model", cfg="VJEPA2Config", frames=16, size=256, family="vjepa2",
        input="pixel_values_videos", output="last_hidden_state", forward_kwargs={"skip_predictor": True},
        tubelet_arch="vjepa2-vitl-256", kwargs=dict(frames_per_clip=64, **VJEPA2_VITL)),
    "vjepa2-vitl-64x256": dict(
        cls="VJEPA2Model", cfg="VJEPA2Config", frames=64, size=256, family="vjepa2",
        input="pixel_values_videos", output="last_hidden_state", forward_kwargs={"skip_predictor": True},
        tubelet_arch="vjepa2-vitl-256", kwargs=dict(frames_per_clip=64, **VJEPA2_VITL)),
    "vjepa2-vitl-ssv2-16x256": dict(
        cls="VJEPA2ForVideoClassification", cfg="VJEPA2Config", frames=16, size=256, family="vjepa2",
        input="pixel_values_videos", output="logits", forward_kwargs={},
        tubelet_arch="vjepa2-vitl-ssv2",
        kwargs=dict(frames_per_clip=16, num_labels=174, num_pooler_layers=3, **VJEPA2_VITL)),
}
ALL_ARCHS = {**ARCHS, **VJEPA2_ARCHS}   # ARCHS (the default set, shared with the other scripts) first
PEER_ORDER = ["torch-eager", "torch-compile", "ort", "openvino", "tubelet"]


def arch_size(arch):
    """Frame side in pixels (224 for the ViT-B set)."""
    return ALL_ARCHS[arch].get("size", 224)


def arch_label(arch):
    """The arch as the tables show it: the ViT-B names as they were, the others with T x S^2."""
    if arch in ARCHS or arch not in ALL_ARCHS:
        return arch
    return f"{arch} ({ALL_ARCHS[arch]['frames']}×{arch_size(arch)}²)"


def model_output(model, arch, x):
    """The timed forward: model(pixel_values=x).logits for the ViT-B set; V-JEPA 2's input name,
    forward arguments (skip_predictor) and output otherwise."""
    spec = ALL_ARCHS[arch]
    out = model(**{spec.get("input", "pixel_values"): x}, **spec.get("forward_kwargs", {}))
    return getattr(out, spec.get("output", "logits"))


# ---------------------------------------------------------------------------------------------
# FLOPs


def flops_per_clip_vjepa2(arch):
    """V-JEPA 2 (from the arch's config): Conv3d patch embedding (tubelet x patch x patch), pre-LN
    blocks (q, k, v, proj, MLP) over all tokens (no cls), attention over all tokens; RoPE, norms
    and GELU not counted. The classifier adds the attentive pooler: num_pooler_layers
    self-attention blocks over all tokens (q, k, v, out_proj, MLP), then one cross-attention block
    (one learned query: q_proj of 1 token, k/v of all tokens, QK^T and AV of 1 x N, no output
    projection, MLP on 1 token), then the linear classifier. In GFLOP."""
    spec = ALL_ARCHS[arch]
    k = spec["kwargs"]
    d, layers = k["hidden_size"], k["num_hidden_layers"]
    ff = int(d * k.get("mlp_ratio", 4.0))
    p, tt, ch = k["patch_size"], k["tubelet_size"], k.get("in_chans", 3)
    frames, size = spec["frames"], arch_size(arch)
    n = max(1, frames // tt) * (size // p) ** 2
    mac = {"patch_embed": n * (ch * tt * p * p) * d,
           "linear": layers * (4 * n * d * d + 2 * n * d * ff),
           "attention": layers * 2 * n * n * d,
           "classifier": 0}
    if spec["cls"] == "VJEPA2ForVideoClassification":
        pl = k.get("num_pooler_layers", 3)
        mac["linear"] += pl * (4 * n * d * d + 2 * n * d * ff) + (d * d + 2 * n * d * d + 2 * d * ff)
        mac["attention"] += pl * 2 * n * n * d + 2 * n * d
        mac["classifier"] = d * k["num_labels"]
    g = {key: 2 * v / 1e9 for key, v in mac.items()}
    g["total"] = sum(g.values())
    g["tokens"] = n
    return g


def flops_per_clip(arch):
    """Analytic FLOPs of one clip (2 per multiply-add), with a breakdown, in GFLOP."""
    if ALL_ARCHS.get(arch, {}).get("family") == "vjepa2":
        return flops_per_clip_vjepa2(arch)
    d, ff, layers, labels = 768, 3072, 12, 400
    grid = (224 // 16) ** 2  # 196 patches per frame
    mac = {}
    if arch in ("videomae-base", "vivit-base"):
        frames = ARCHS[arch]["frames"]
        n_patch = frames // 2 * grid                      # tubelets of 2 frames x 16 x 16
        n = n_patch + (1 if arch == "vivit-base" else 0)  # ViViT has a CLS token
        mac["patch_embed"] = n_patch * (3 * 2 * 16 * 16) * d
        mac["linear"] = layers * (4 * n * d * d + 2 * n * d * ff)  # qkv, proj, fc1, fc2
        mac["attention"] = layers * 2 * n * n * d                  # QK^T and AV over all heads
        tokens = n
    elif arch == "timesformer-base":
        t = ARCHS[arch]["frames"]
        n_patch = t * grid                  # 1568 patch tokens
        n_spatial = t * (grid + 1)          # spatial attention: per frame, CLS + 196
        n = n_patch + 1                     # 1569 tokens between layers
        mac["patch_embed"] = n_patch * (3 * 16 * 16) * d
        mac["linear"] = layers * (
            4 * n_patch * d * d             # temporal qkv + proj
            + n_patch * d * d               # temporal_dense
            + 4 * n_spatial * d * d         # spatial qkv + proj
            + 2 * n * d * ff)               # MLP
        mac["attention"] = layers * (2 * grid * t * t * d + 2 * t * (grid + 1) ** 2 * d)
        tokens = n
    else:
        raise ValueError(arch)
    mac["classifier"] = d * labels
    g = {k: 2 * v / 1e9 for k, v in mac.items()}
    g["total"] = sum(g.values())
    g["tokens"] = tokens
    return g


# ---------------------------------------------------------------------------------------------
# machine helpers (also used in the children)


def cpu_and_isa():
    """This machine's CPU model name and its widest FMA instruction set (for the tables)."""
    info = open("/proc/cpuinfo").read().splitlines()
    cpu = next((l.split(":", 1)[1].strip() for l in info if l.startswith("model name")), "?")
    flags = next((l for l in info if l.startswith("flags")), "")
    return cpu, "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"


def machine_busy_s():
    """Busy CPU seconds of the whole machine so far (all processes), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def wait_idle(max_s, threshold):
    """Waits up to max_s seconds for other processes to use at most `threshold` cores (0.5 s window).
    Returns the last measured load of the others."""
    if max_s <= 0:
        return None
    start = time.time()
    while True:
        b0, c0, w0 = machine_busy_s(), time.process_time(), time.time()
        time.sleep(0.5)
        load = max(0.0, ((machine_busy_s() - b0) - (time.process_time() - c0)) / (time.time() - w0))
        if load <= threshold or time.time() - start > max_s:
            return load


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def allowed_other(max_other, threads):
    """Cores other processes may use without competing: max_other plus the cores we leave free."""
    return max_other + max(0, (os.cpu_count() or 1) - threads)


def timed_repeats(fn, repeats, warmup, tries, max_other, wait_s):
    """Runs fn warmup times, then `repeats` timed calls; redoes the timed calls (up to `tries` times)
    while other processes used more than max_other cores meanwhile. Returns (ms list, other load)."""
    for _ in range(warmup):
        fn()
    best = None
    for _ in range(max(1, tries)):
        wait_idle(wait_s, max_other)
        b0, c0, w0 = machine_busy_s(), time.process_time(), time.time()
        ms = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
        other = max(0.0, ((machine_busy_s() - b0) - (time.process_time() - c0)) / (time.time() - w0))
        if best is None or other < best[1]:
            best = (ms, other)
        if other <= max_other:
            break
    return best


# ---------------------------------------------------------------------------------------------
# children


def build_model(arch, device=None):
    import torch
    import transformers
    spec = ALL_ARCHS[arch]
    cfg = getattr(transformers, spec["cfg"])(**spec["kwargs"])
    torch.manual_seed(0)
    cls = getattr(transformers, spec["cls"])
    if device is not None:
        with torch.device(device):
            model = cls(cfg)
    else:
        model = cls(cfg)
    model.eval()
    return model


def make_input(arch, batch):
    import numpy as np
    rng = np.random.default_rng(0)
    s = arch_size(arch)
    return rng.standard_normal((batch, ALL_ARCHS[arch]["frames"], 3, s, s), dtype=np.float32)


def peak_rss_self_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_torch(a):
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    t0 = time.time()
    model = build_model(a.arch)
    x = torch.from_numpy(make_input(a.arch, a.batch))
    res = {"load_s": time.time() - t0, "attn_impl": getattr(model.config, "_attn_implementation", None),
           "torch_threads": torch.get_num_threads()}
    if a.compile:
        model = torch.compile(model)
        t0 = time.time()
        with torch.inference_mode():
            model_output(model, a.arch, x)
        res["compile_s"] = time.time() - t0

    def run():
        with torch.inference_mode():
            return model_output(model, a.arch, x)

    ms, other = timed_repeats(run, a.repeats, a.warmup, a.tries, allowed_other(a.max_other, a.threads),
                              a.wait_idle)
    res.update(ms=ms, other_load=other, peak_rss_self_mb=peak_rss_self_mb())
    return res


def child_export(a):
    import torch
    model = build_model(a.arch)
    x = torch.from_numpy(make_input(a.arch, a.batch))
    res = {"attn_impl": getattr(model.config, "_attn_implementation", None)}
    spec = ALL_ARCHS[a.arch]
    target = model
    if a.arch not in ARCHS:   # V-JEPA 2: its input name, forward arguments and one output tensor
        class Forward(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, pixel_values_videos):
                return model_output(self.m, a.arch, pixel_values_videos)

        target = Forward(model).eval()
    in_name, out_name = spec.get("input", "pixel_values"), spec.get("output", "logits")
    errors = []
    for dynamo in (False, True):
        t0 = time.time()
        try:
            with torch.no_grad():
                torch.onnx.export(target, (x,), a.onnx, input_names=[in_name],
                                  output_names=[out_name], opset_version=17, dynamo=dynamo)
            res.update(exporter="dynamo" if dynamo else "torchscript", export_s=time.time() - t0)
            break
        except Exception as e:  # noqa: BLE001 - report any exporter failure and try the other
            errors.append(f"{'dynamo' if dynamo else 'torchscript'}: {type(e).__name__}: {e}"[:400])
    else:
        raise RuntimeError("ONNX export failed: " + " | ".join(errors))
    if errors:
        res["export_errors"] = errors
    import onnx
    m = onnx.load(a.onnx, load_external_data=False)
    res["opset"] = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=None)
    res["versions"] = {"torch": torch.__version__, "onnx": onnx.__version__}
    return res


def child_ort(a):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.time()
    sess = ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
    load_s = time.time() - t0
    x = make_input(a.arch, a.batch)
    name = sess.get_inputs()[0].name

    def run():
        return sess.run(None, {name: x})[0]

    ms, other = timed_repeats(run, a.repeats, a.warmup, a.tries, allowed_other(a.max_other, a.threads),
                              a.wait_idle)
    return {"ms": ms, "other_load": other, "load_s": load_s, "peak_rss_self_mb": peak_rss_self_mb(),
            "providers": sess.get_providers()}


def child_openvino(a):
    import openvino as ov
    core = ov.Core()
    t0 = time.time()
    cfg = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
           "INFERENCE_NUM_THREADS": str(a.threads),
           "INFERENCE_PRECISION_HINT": getattr(a, "ov_precision", None) or "f32"}
    compiled = core.compile_model(core.read_model(a.onnx), "CPU", cfg)
    load_s = time.time() - t0
    req = compiled.create_infer_request()
    x = make_input(a.arch, a.batch)

    def run():
        return req.infer({0: x})

    ms, other = timed_repeats(run, a.repeats, a.warmup, a.tries, allowed_other(a.max_other, a.threads),
                              a.wait_idle)
    return {"ms": ms, "other_load": other, "load_s": load_s, "peak_rss_self_mb": peak_rss_self_mb(),
            "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}


def child_flops(a):
    """Counts FLOPs with torch.utils.flop_counter on the meta device (no arithmetic is done)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(a.arch, device="meta")
    s = arch_size(a.arch)
    x = torch.empty((1, ALL_ARCHS[a.arch]["frames"], 3, s, s), device="meta")
    fc = FlopCounterMode(display=False)
    with fc, torch.inference_mode():
        model_output(model, a.arch, x)
    by_op = {str(k): v for k, v in fc.get_flop_counts().get("Global", {}).items()}
    return {"gflop": fc.get_total_flops() / 1e9, "by_op_gflop": {k: v / 1e9 for k, v in by_op.items()}}


def write_child_result(path, fn, *args):
    """A child process's end: the dict fn(*args) returns ("ok" true unless it says otherwise or
    reports "unsupported"), or the exception it raised, written as JSON to path for the parent.
    Shared by the children of this script, train_compare.py and precision.py."""
    try:
        res = fn(*args)
        res.setdefault("ok", not res.get("unsupported"))
    except Exception as e:  # noqa: BLE001 - the parent reports it
        import traceback
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-4000:]}
    with open(path, "w") as f:
        json.dump(res, f)
    return 0


def child_main(a):
    fn = {"torch": child_torch, "export": child_export, "ort": child_ort, "openvino": child_openvino,
          "flops": child_flops}[a._child]
    return write_child_result(a.result, fn, a)


# ---------------------------------------------------------------------------------------------
# parent


def run_child(cmd, timeout, env=None):
    """Runs cmd in its own process group. Returns dict with rc, timed_out, stdout, stderr, peak RSS
    (MB, from os.wait4: the child and its waited-for descendants), wall seconds, CPU seconds and the
    other processes' average load (cores) over the child's lifetime."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy0, t0 = machine_busy_s(), time.time()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() - t0 > timeout:
                timed_out = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.1)
        wall = time.time() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu = ru.ru_utime + ru.ru_stime
        out.seek(0)
        err.seek(0)
        return {"rc": p.returncode, "timed_out": timed_out,
                "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace"),
                "peak_rss_mb": ru.ru_maxrss / 1024.0, "wall_s": wall, "cpu_s": cpu,
                "other_load_lifetime": max(0.0, (machine_busy_s() - busy0 - cpu) / max(wall, 1e-9))}


def child_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def run_py_child(mode, args, extra, timeout):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
        result_path = tf.name
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", mode, "--result", result_path,
           "--threads", str(args.threads_cur), "--repeats", str(args.repeats),
           "--warmup", str(args.warmup), "--tries", str(args.tries),
           "--max-other", str(args.max_other), "--wait-idle", str(args.wait_idle)] + extra
    r = run_child(cmd, timeout, env=child_env(args.threads_cur))
    res = None
    try:
        with open(result_path) as f:
            res = json.load(f)
    except (OSError, ValueError):
        pass
    finally:
        try:
            os.unlink(result_path)
        except OSError:
            pass
    if res is None:
        tail = (r["stderr"] or r["stdout"])[-1500:]
        why = "timed out" if r["timed_out"] else f"exit status {r['rc']}"
        res = {"ok": False, "error": f"child {mode} {why}: {tail}"}
    return res, r


def parse_tubelet_json(stdout):
    """The last line of stdout (or the whole output) that is a JSON object with the required keys."""
    need = {"arch", "batch", "threads", "ms_median", "gflop_per_clip", "gflops_per_s", "peak_rss_mb"}
    candidates = [ln.strip() for ln in stdout.splitlines() if ln.strip().startswith("{")][::-1]
    candidates.append(stdout.strip())
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict):
            missing = need - obj.keys()
            if missing:
                raise ValueError(f"tubelet JSON lacks keys {sorted(missing)}")
            return obj
    raise ValueError("no JSON object in tubelet output")


def versions():
    from importlib import metadata
    v = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "openvino", "numpy"):
        try:
            v[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            v[pkg] = None
    return v


def machine_info():
    info = {"hostname": platform.node(), "kernel": platform.release()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        kv = {}
        for ln in out.splitlines():
            if ":" in ln:
                k, v = ln.split(":", 1)
                kv[k.strip()] = v.strip()
        info["model"] = kv.get("Model name")
        info["cpus"] = kv.get("CPU(s)")
        info["threads_per_core"] = kv.get("Thread(s) per core")
        info["hypervisor"] = kv.get("Hypervisor vendor")
        info["l2"], info["l3"] = kv.get("L2 cache"), kv.get("L3 cache")
        flags = set(kv.get("Flags", "").split())
        note = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]
        info["flags_of_note"] = [f for f in note if f in flags]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_gb"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def fma_peak(path, threads, override=None):
    """The fp32 FMA peak at `threads` threads: `override` if given, else the median of 11 runs of
    build/fma_peak (the host's clock drifts both ways, so the median rather than the best run)."""
    if override:
        return {"ok": True, "gflops": override, "median": None, "threads": threads, "source": "--peak-gflops"}
    if not os.path.exists(path):
        return {"ok": False, "note": f"{path} not built (see bench/README.md); % of peak omitted"}
    try:
        b0, w0 = machine_busy_s(), time.time()
        out = subprocess.run([path, "--json", "--kernels", "fp32", "--threads", str(threads), "--reps", "11"],
                             capture_output=True, text=True, timeout=300)
        wall = time.time() - w0
        j = json.loads(out.stdout)
        g = j["kernels"]["fp32_fma"]["gflops"][str(threads)]
        # others' load: busy time minus what fma_peak itself used (threads cores while it ran)
        other = max(0.0, (machine_busy_s() - b0) / wall - threads)
        return {"ok": True, "gflops": g["median"], "median": g["median"], "best": g["best"],
                "threads": threads, "clock_ghz_scalar_est": j.get("clock_ghz_scalar_est"),
                "other_load_approx": other, "source": "build/fma_peak, median of 11"}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        return {"ok": False, "note": f"fma_peak failed: {e}"}


def onnx_path(arch, batch):
    return os.path.join(ROOT, "bench", "out", f"{arch}-b{batch}-opset17.onnx")


def measure_peer(peer, arch, batch, args, gflop, log):
    """Returns one result row for (peer, arch, batch, args.threads_cur)."""
    T = args.threads_cur
    row = {"arch": arch, "batch": batch, "threads": T, "peer": peer, "status": "ok", "notes": [],
           "gflop_per_clip": gflop, "date": datetime.datetime.now().isoformat(timespec="seconds")}
    row["wait_idle_load"] = wait_idle(args.wait_idle, allowed_other(args.max_other, T))
    row["loadavg_before"] = loadavg()
    if peer in ("torch-eager", "torch-compile"):
        import importlib.metadata as md
        comp = peer == "torch-compile"
        row["how"] = (f"PyTorch {md.version('torch')} fp32, eval + inference_mode, "
                      f"set_num_threads({T})" + (", torch.compile (inductor, default mode)" if comp else
                                                   ", eager"))
        extra = ["--arch", arch, "--batch", str(batch)] + (["--compile"] if comp else [])
        res, r = run_py_child("torch", args, extra, args.compile_timeout if comp else args.timeout)
        if res.get("ok"):
            row["attn_impl"] = res.get("attn_impl") or "eager"
            if comp:
                row["compile_s"] = res.get("compile_s")
                row["notes"].append(f"compile + first call {res.get('compile_s', 0):.0f} s")
    elif peer in ("ort", "openvino"):
        import importlib.metadata as md
        path = onnx_path(arch, batch)
        meta_path = path + ".json"
        meta = None
        if os.path.exists(path) and os.path.exists(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
        if meta is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            log(f"  exporting {arch} batch {batch} to {os.path.relpath(path, ROOT)} ...")
            res, r = run_py_child("export", args, ["--arch", arch, "--batch", str(batch), "--onnx", path],
                                  args.timeout)
            if not res.get("ok"):
                row.update(status="failed", error="ONNX export: " + res.get("error", "?"))
                row["how"] = f"ONNX Runtime {md.version('onnxruntime')}"
                return row
            meta = {k: res.get(k) for k in ("exporter", "export_s", "opset", "export_errors", "versions",
                                            "attn_impl")}
            meta["peak_rss_mb"] = r["peak_rss_mb"]
            with open(meta_path, "w") as f:
                json.dump(meta, f, indent=1)
            log(f"  exported with the {meta['exporter']} exporter in {meta['export_s']:.0f} s")
        row["export"] = meta
        if peer == "ort":
            row["how"] = (f"ONNX Runtime {md.version('onnxruntime')} CPU EP, ORT_ENABLE_ALL, intra_op={T}, "
                          f"inter_op=1; opset {meta.get('opset')} via the {meta.get('exporter')} exporter")
        else:
            row["how"] = (f"OpenVINO {md.version('openvino')} CPU plugin on the same ONNX graph, LATENCY "
                          f"hint, 1 stream, INFERENCE_NUM_THREADS={T}, INFERENCE_PRECISION_HINT=f32")
        row["attn_impl"] = meta.get("attn_impl") or "eager"
        res, r = run_py_child(peer, args, ["--arch", arch, "--batch", str(batch), "--onnx", path],
                              args.timeout)
    elif peer == "tubelet":
        exe = args.tubelet
        shown = os.path.relpath(exe, ROOT) if os.path.abspath(exe).startswith(ROOT + os.sep) else exe
        spec = ALL_ARCHS[arch]
        shape = []   # the ViT-B set: the preset's own frames and size
        if arch not in ARCHS:   # V-JEPA 2: tubelet's preset at this arch's frames and size
            shape = ["--frames", str(spec["frames"]), "--size", str(arch_size(arch))]
        row["how"] = (f"`{shown} bench --arch "
                      + (" ".join([spec["tubelet_arch"]] + shape) if shape else "ARCH")
                      + f" --batch B --threads {T} --json"
                      + (f" {args.tubelet_args}" if args.tubelet_args else "") + "`")
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            row.update(status="skipped", error=f"{exe} not found (build tubelet first)")
            return row
        cmd = ([exe, "bench", "--arch", spec.get("tubelet_arch", arch)] + shape
               + ["--batch", str(batch), "--threads", str(T), "--json"])
        same = ["--repeats", str(args.repeats), "--warmup", str(args.warmup)]
        extra = shlex.split(args.tubelet_args)
        wait_idle(args.wait_idle, allowed_other(args.max_other, T))
        r = run_child(cmd + same + extra, args.timeout, env=child_env(T))
        if r["rc"] == 2 and "unknown option" in r["stderr"]:   # a bench without --repeats/--warmup
            r = run_child(cmd + extra, args.timeout, env=child_env(T))
        else:
            row["how"] = row["how"][:-1] + f" --repeats {args.repeats} --warmup {args.warmup}`"
        if r["rc"] != 0:
            why = "timed out" if r["timed_out"] else f"exit status {r['rc']}"
            row.update(status="failed", error=f"{why}: {(r['stderr'] or r['stdout'])[-800:]}")
            return row
        try:
            j = parse_tubelet_json(r["stdout"])
        except ValueError as e:
            row.update(status="failed", error=f"{e}; output: {r['stdout'][-400:]}")
            return row
        row["tubelet_json"] = j
        ms = float(j["ms_median"])
        res = {"ok": True, "ms": [float(v) for v in j.get("ms_all", [])] or [ms], "ms_median": ms,
               "other_load": j.get("other_load", r["other_load_lifetime"])}
        # consistency: gflops_per_s should be gflop_per_clip * batch / seconds per call
        g_j = float(j["gflop_per_clip"])
        if abs(g_j - gflop) > 0.05 * gflop:
            row["notes"].append(f"tubelet counts {g_j:.1f} GFLOP/clip vs {gflop:.1f} here")
        # ms_median is per forward call of the whole batch; if gflops_per_s only fits a per-clip
        # reading, say so and convert
        per_call = g_j * batch / (ms / 1e3)
        per_clip = g_j / (ms / 1e3)
        gps = float(j["gflops_per_s"])
        if batch > 1 and abs(gps - per_clip) < 0.03 * gps and abs(gps - per_call) > 0.03 * gps:
            row["notes"].append("tubelet's ms_median looks per clip (gflops_per_s fits that); treated so")
            res["ms_median"] = ms * batch
            res["ms"] = [v * batch for v in res["ms"]]
        if j.get("peak_rss_mb") is not None:
            row["peak_rss_self_mb"] = float(j["peak_rss_mb"])
            row["notes"].append(f"self-reported peak RSS {float(j['peak_rss_mb']):.0f} MB")
        for k in ("gemm_backend", "gemm", "version", "activation_mb"):
            if k in j:
                row[k] = j[k]
        if j.get("gemm") or j.get("gemm_backend"):
            row["how"] += f", GEMM: {j.get('gemm') or j.get('gemm_backend')}"
    else:
        raise ValueError(peer)

    row["loadavg_after"] = loadavg()
    row["wall_s"] = r["wall_s"]
    row["peak_rss_mb"] = r["peak_rss_mb"]
    row["other_load_lifetime"] = r["other_load_lifetime"]
    if not res.get("ok"):
        row.update(status="failed" if not r.get("timed_out") else "timeout", error=res.get("error", "?"))
        return row
    ms = res["ms"]
    row["ms_all"] = [round(v, 3) for v in ms]
    row["ms_median"] = res.get("ms_median", statistics.median(ms))
    row["ms_per_clip"] = row["ms_median"] / batch
    row["gflops"] = gflop * batch / (row["ms_median"] / 1e3)
    row["other_load"] = res.get("other_load")
    if res.get("peak_rss_self_mb") is not None:
        row["peak_rss_self_mb"] = res["peak_rss_self_mb"]
    if res.get("load_s") is not None:
        row["load_s"] = res["load_s"]
    if row["other_load"] is not None and row["other_load"] > allowed_other(args.max_other, T):
        row["notes"].append(f"machine busy during timing ({row['other_load']:.2f} cores used by others)")
    if len(ms) > 1 and (max(ms) - min(ms)) > 0.15 * row["ms_median"]:
        row["notes"].append(f"spread {min(ms):.0f}-{max(ms):.0f} ms")
    return row


# ---------------------------------------------------------------------------------------------
# report


def combine_rounds(raw, rounds, max_other):
    """One row per (arch, batch, threads, peer): with several rounds, the median over the rounds of
    the per-round medians (rounds whose timing was disturbed by other processes are left out when
    an undisturbed one exists); peak RSS is the largest."""
    if rounds <= 1:
        return raw
    groups = {}
    for r in raw:
        groups.setdefault((r["arch"], r["batch"], r["threads"], r["peer"]), []).append(r)
    out = []
    for rs in groups.values():
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            out.append(rs[-1])
            continue
        calm = [r for r in ok if r.get("other_load") is None
                or r["other_load"] <= allowed_other(max_other, r["threads"])]
        use = calm or ok
        med = statistics.median(r["ms_median"] for r in use)
        base = dict(min(use, key=lambda r: abs(r["ms_median"] - med)))
        batch = base["batch"]
        base.update(ms_median=med, ms_per_clip=med / batch,
                    gflops=base["gflop_per_clip"] * batch / (med / 1e3),
                    peak_rss_mb=max(r["peak_rss_mb"] for r in ok),
                    rounds_ms_per_clip=[round(r["ms_per_clip"], 1) for r in ok],
                    ms_all=[v for r in use for v in r.get("ms_all", [])])
        base["notes"] = [n for n in base.get("notes", []) if not n.startswith("spread")]
        base["notes"].insert(0, "rounds: " + ", ".join(
            f"{r['ms_per_clip']:.0f}" + ("" if r in use else " (busy, left out)") for r in ok) + " ms/clip")
        if len(ok) < len(rs):
            base["notes"].append(f"{len(rs) - len(ok)} round(s) failed: {rs[0].get('error', '')[:200]}")
        out.append(base)
    return out


def fmt(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def render(data):
    rows = data["rows"]
    L = [BEGIN, "", "## Comparison with PyTorch and ONNX Runtime", ""]
    L.append(f"Generated by `bench/compare.py` on {data['date']} ({data['wall_s'] / 60:.1f} min): "
             f"`{data['command']}`")
    L.append("")
    m, v = data["machine"], data["versions"]
    L.append(f"- Machine: {m.get('model')}, {m.get('cpus')} CPUs ({m.get('threads_per_core')} thread/core), "
             f"{m.get('hypervisor') or 'bare metal'} VM, L2 {m.get('l2')}, L3 {m.get('l3')}, "
             f"{m.get('mem_gb')} GB RAM; kernel {m.get('kernel')}; flags of note: "
             f"{', '.join(m.get('flags_of_note', []))}")
    L.append("- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    pk = data["fma_peak"]
    for p in pk.values():   # JSON of older versions
        if p.get("ok") and "median" not in p and "best" in p:   # gflops was the median
            p["median"] = p["gflops"]
        if p.get("ok") and p.get("source", "").endswith("best of 11"):   # gflops was the best run
            p["best"], p["gflops"] = p["gflops"], p["median"]
            p["source"] = "build/fma_peak, median of 11"
    for T, p in sorted(pk.items()):
        if p.get("ok") and p.get("source", "").startswith("--peak"):
            L.append(f"- FP32 peak at {T} thread(s): {p['gflops']:.0f} GFLOP/s (given with --peak-gflops)")
        elif p.get("ok"):
            L.append(f"- FP32 FMA peak at {T} thread(s) (`build/fma_peak`, vfmadd231ps zmm, or ymm without AVX-512, median of 11 "
                     f"runs; used for % of peak): {p['gflops']:.0f} GFLOP/s (best {p['best']:.0f}"
                     + (f"; other processes used ~{p['other_load_approx']:.1f} cores meanwhile)"
                        if p.get("other_load_approx") is not None else ")"))
        else:
            L.append(f"- FP32 FMA peak at {T} thread(s): {p.get('note')}")
    L.append(f"- Load average (1/5/15 min) before: {data['loadavg_before']}; after: {data['loadavg_after']}. "
             "The machine is shared (2 cores): each peer waited for the others to go quiet and its "
             "timed repeats were redone when other processes used more than "
             f"{data['args']['max_other']} cores (plus any cores the peer leaves free) meanwhile "
             "(\"other load\" below, in cores, is that of the least disturbed try).")
    rounds = data["args"].get("rounds", 1)
    L.append(f"- Method: {data['args']['warmup']} warm-up call(s), then the median of "
             f"{data['args']['repeats']} timed calls; each peer in its own process (peak RSS of that "
             "process from wait4, covering model construction/loading and the run); input in memory."
             + (f" All peers were run {rounds} times in turn (rounds), and the table gives the median round "
                "(the per-round ms/clip are in the notes): the host's speed drifts by 10-25% over "
                "minutes even when this VM is idle, and interleaving keeps the ratios fair."
                if rounds > 1 else ""))
    shown = list(data.get("flops", {})) + [r["arch"] for r in rows]
    for arch in [x for x in VJEPA2_ARCHS if x in shown]:   # only when such rows are present
        spec, k = VJEPA2_ARCHS[arch], VJEPA2_ARCHS[arch]["kwargs"]
        L.append(f"- {arch}: transformers `{spec['cls']}` with random weights (hidden {k['hidden_size']}, "
                 f"{k['num_hidden_layers']} layers, {k['num_attention_heads']} heads, MLP ratio "
                 f"{k['mlp_ratio']:g}, patch {k['tubelet_size']}×{k['patch_size']}×{k['patch_size']}, "
                 f"frames_per_clip {k['frames_per_clip']}"
                 + (f", {k['num_pooler_layers']} + 1 pooler blocks, {k['num_labels']} labels"
                    if "num_labels" in k else "")
                 + f"), input `{spec['input']}` ({spec['frames']}, 3, {spec['size']}, {spec['size']}) per clip, "
                 f"output `{spec['output']}`"
                 + (", forward(skip_predictor=True): the predictor's weights are built (in peak RSS) "
                    "but not run" if spec["forward_kwargs"].get("skip_predictor") else "")
                 + f"; tubelet: `bench --arch {spec['tubelet_arch']} --frames {spec['frames']} "
                 f"--size {spec['size']}`")
    L.append("")
    L.append("FLOPs per clip (analytic, 2 x multiply-adds of all matmuls; norms, softmax, GELU not counted):")
    L.append("")
    L.append("| arch | tokens | linear | attention (QK^T, AV) | patch embed | classifier | total GFLOP | "
             "torch FlopCounter |")
    L.append("|---|---|---|---|---|---|---|---|")
    for arch, g in data["flops"].items():
        chk = data.get("flop_check", {}).get(arch)
        chk_s = (f"{chk['gflop']:.1f} ({chk['gflop'] / g['total'] * 100 - 100:+.1f}%)"
                 if chk and chk.get("ok") else (chk.get("error", "-")[:60] if chk else "-"))
        L.append(f"| {arch_label(arch)} | {g['tokens']} | {g['linear']:.1f} | {g['attention']:.1f} | "
                 f"{g['patch_embed']:.2f} | {g['classifier']:.4f} | **{g['total']:.1f}** | {chk_s} |")
    L.append("")
    L.append("Results (ms per clip = median ms per forward call / batch; GFLOP/s from the analytic count; "
             "tubelet/peer = tubelet time / peer time, so < 1 means tubelet is faster; peer/tubelet = "
             "the speed-up of tubelet over that peer):")
    L.append("")
    L.append("| arch | batch | threads | peer | ms/clip | GFLOP/s | % FMA peak | peak RSS MB | "
             "tubelet/peer | peer/tubelet | other load | notes |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    tub = {(r["arch"], r["batch"], r["threads"]): r for r in rows
           if r["peer"] == "tubelet" and r["status"] == "ok"}

    def key(r):
        return (list(ALL_ARCHS).index(r["arch"]) if r["arch"] in ALL_ARCHS else 99, r["batch"], r["threads"],
                PEER_ORDER.index(r["peer"]) if r["peer"] in PEER_ORDER else 99)

    for r in sorted(rows, key=key):
        peak = pk.get(str(r["threads"]), {})
        if r["status"] != "ok":
            L.append(f"| {arch_label(r['arch'])} | {r['batch']} | {r['threads']} | {r['peer']} | {r['status']} | | | | | | | "
                     f"{(r.get('error') or '').replace('|', '/').replace(chr(10), ' ')[:300]} |")
            continue
        pct = 100 * r["gflops"] / peak["gflops"] if peak.get("ok") else None
        t = tub.get((r["arch"], r["batch"], r["threads"]))
        if t is not None and r["peer"] != "tubelet":
            ratio = t["ms_per_clip"] / r["ms_per_clip"]
            ratio_s, inv_s = f"{ratio:.2f}", f"{1 / ratio:.2f}"
        else:
            ratio_s = inv_s = "n/a" if r["peer"] != "tubelet" else "-"
        notes = list(r.get("notes", []))
        if r.get("date") and r["date"][:10] != data["date"][:10]:
            notes.append(f"measured {r['date']}")
        L.append(f"| {arch_label(r['arch'])} | {r['batch']} | {r['threads']} | {r['peer']} | {r['ms_per_clip']:.0f} | "
                 f"{r['gflops']:.1f} | {fmt(pct, '.1f')} | {fmt(r.get('peak_rss_mb'), '.0f')} | {ratio_s} | "
                 f"{inv_s} | {fmt(r.get('other_load'), '.2f')} | {'; '.join(notes)} |")
    L.append("")
    L.append("How each peer was run:")
    L.append("")
    seen, attn = set(), {}
    for r in sorted(rows, key=key):
        how = r.get("how") or ""
        m_ = re.search(r",? ?\(?attention: (\w+)\)?", how)   # rows written by older versions
        if m_:
            how = how[:m_.start()] + how[m_.end():]
            r.setdefault("attn_impl", m_.group(1))
        if r.get("attn_impl") and r["peer"] != "tubelet":
            attn[r["arch"]] = r["attn_impl"]
        if r["peer"] == "torch-compile" and "on-disk cache" not in how:
            how += ("; the compile time in the notes includes the first call, and inductor's on-disk "
                    "cache (/tmp/torchinductor_$USER) makes later runs compile faster")
        if (r["peer"], how) in seen or not how:
            continue
        seen.add((r["peer"], how))
        L.append(f"- {r['peer']}: {how}")
    for r in rows:
        if "export" in r and r["export"].get("export_errors"):
            data.setdefault("notes", []).append(
                f"ONNX export of {r['arch']}: first exporter failed: {r['export']['export_errors'][0][:300]}")
    if attn:
        L.append("- attention in PyTorch and in the exported ONNX graphs (the model's default): " + ", ".join(
            f"{a_} {v_}" + (" (no sdpa path in transformers)" if v_ == "eager" else "")
            for a_, v_ in attn.items()))
    if data.get("notes"):
        L.append("")
        L.append("Notes:")
        L.append("")
        for n in data["notes"]:
            L.append(f"- {n}")
    L.append("")
    slim = {k: data[k] for k in ("date", "rows")}
    # "--" may not appear in an HTML comment; it only occurs inside JSON strings, so escape it there
    L.append(DATA_PREFIX + json.dumps(slim, separators=(",", ":")).replace("--", "-\\u002d") + " -->")
    L.append("")
    L.append(END)
    return "\n".join(L)


def load_previous_rows(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return []
    i = text.find(DATA_PREFIX)
    if i < 0:
        return []
    j = text.find(" -->", i)
    try:
        return json.loads(text[i + len(DATA_PREFIX):j])["rows"]
    except (ValueError, KeyError):
        return []


def model_is_current(d, want):
    """True when directory d holds model.safetensors built from `want` (its bench_source.json):
    the benchmark scripts rebuild a random-weight model only when its recipe changed."""
    try:
        with open(os.path.join(d, "bench_source.json")) as f:
            return json.load(f) == want and os.path.exists(os.path.join(d, "model.safetensors"))
    except (OSError, ValueError):
        return False


def run_job_child(script, mode, job, timeout, lock=None):
    """Runs `script --_child MODE --job JOB --result RESULT` in its own process (peak RSS from
    wait4), under `flock LOCK` when lock is given; the job dict goes in as JSON, the child's result
    dict comes back. Returns (result dict, run_child dict). Used by train_compare.py and
    precision.py."""
    with tempfile.TemporaryDirectory(prefix=os.path.basename(script) + ".") as d:
        jp, rp = os.path.join(d, "job.json"), os.path.join(d, "result.json")
        with open(jp, "w") as f:
            json.dump(job, f)
        cmd = (["flock", lock] if lock else []) + [
            sys.executable, os.path.abspath(script), "--_child", mode, "--job", jp, "--result", rp]
        r = run_child(cmd, timeout, env=child_env(job.get("threads", 2)))
        try:
            with open(rp) as f:
                return json.load(f), r
        except (OSError, ValueError):
            why = "timed out" if r["timed_out"] else f"exit status {r['rc']}"
            return {"ok": False, "error": f"child {mode} {why}: {(r['stderr'] or r['stdout'])[-1500:]}"}, r


def write_results(path, section, begin=BEGIN, end=END):
    """Replaces the text between the markers `begin` and `end` of `path` with `section` (which
    includes them); appends the section when the markers are missing. Also used by train_compare.py."""
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    elif text:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = "# tubelet benchmark results\n\n" + section + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", choices=list(ALL_ARCHS),
                    help="repeatable; default: the three ViT-B archs (the V-JEPA 2 ones only when named)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run all peers this many times, interleaved, and report the median round")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--tubelet", default=os.path.join(ROOT, "build", "tubelet"))
    ap.add_argument("--tubelet-args", default="", help="extra arguments for `tubelet bench`")
    ap.add_argument("--peers", default="torch,ort,tubelet",
                    help="comma list of torch (= torch-eager + torch-compile), torch-eager, "
                         "torch-compile, ort, openvino, tubelet")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--json", help="also write all results as JSON here")
    ap.add_argument("--merge", action="store_true",
                    help="keep rows of the previous run (in --out) that this run does not re-measure")
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma_peak"))
    ap.add_argument("--peak-gflops", type=float,
                    help="use this fp32 peak (GFLOP/s at the given threads) instead of running fma_peak")
    ap.add_argument("--render-json", metavar="FILE",
                    help="measure nothing: rewrite --out from the --json file of an earlier run")
    ap.add_argument("--no-flop-check", action="store_true",
                    help="skip the torch FlopCounterMode cross-check of the analytic FLOPs")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per peer process")
    ap.add_argument("--compile-timeout", type=float, default=2400, help="seconds for torch-compile")
    ap.add_argument("--tries", type=int, default=2)
    ap.add_argument("--max-other", type=float, default=0.3)
    ap.add_argument("--wait-idle", type=float, default=60)
    # internal: child processes
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a._child:
        a.arch = a.arch[0] if a.arch else None
        a.batch = a.batch[0]
        a.threads = a.threads[0]
        return child_main(a)

    if a.render_json:
        with open(a.render_json) as f:
            data = json.load(f)
        if a.peak_gflops:
            for T in data["fma_peak"]:
                data["fma_peak"][T] = fma_peak(None, int(T), a.peak_gflops)
        write_results(a.out, render(data))
        print(f"wrote {a.out} from {a.render_json}")
        return 0

    t_start = time.time()
    archs = a.arch or list(ARCHS)
    peers = []
    for p in a.peers.split(","):
        p = p.strip()
        if p == "torch":
            peers += ["torch-eager"] + ([] if a.no_compile else ["torch-compile"])
        elif p in PEER_ORDER:
            if not (p == "torch-compile" and a.no_compile):
                peers.append(p)
        elif p:
            ap.error(f"unknown peer {p!r}")
    peers = sorted(set(peers), key=PEER_ORDER.index)

    def log(msg):
        print(msg, flush=True)

    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "bench/compare.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
            "args": {"repeats": a.repeats, "warmup": a.warmup, "rounds": a.rounds, "max_other": a.max_other,
                     "tries": a.tries,
                     "threads": a.threads, "batch": a.batch, "peers": peers},
            "machine": machine_info(), "versions": versions(), "loadavg_before": loadavg(),
            "notes": [], "rows": []}
    log(f"compare.py: archs {archs}, batch {a.batch}, threads {a.threads}, peers {peers}")
    log(f"machine: {data['machine'].get('model')}; load average {data['loadavg_before']}")

    data["fma_peak"] = {}
    for T in a.threads:
        wait_idle(a.wait_idle, allowed_other(a.max_other, T))
        data["fma_peak"][str(T)] = fma_peak(a.fma_peak, T, a.peak_gflops)
        p = data["fma_peak"][str(T)]
        log(f"fp32 FMA peak, {T} thread(s): " + (f"{p['gflops']:.0f} GFLOP/s" if p["ok"] else p["note"]))

    data["flops"] = {arch: flops_per_clip(arch) for arch in archs}
    for arch, g in data["flops"].items():
        log(f"{arch}: {g['total']:.1f} GFLOP per clip ({g['tokens']} tokens; linear {g['linear']:.1f}, "
            f"attention {g['attention']:.1f}, patch {g['patch_embed']:.2f})")
    data["flop_check"] = {}
    if not a.no_flop_check and any(p.startswith("torch") or p in ("ort", "openvino") for p in peers):
        for arch in archs:
            a.threads_cur = a.threads[0]
            res, _ = run_py_child("flops", a, ["--arch", arch], 600)
            data["flop_check"][arch] = res
            if res.get("ok"):
                g = data["flops"][arch]["total"]
                log(f"  torch FlopCounterMode {arch}: {res['gflop']:.1f} GFLOP ({res['gflop'] / g * 100 - 100:+.1f}%"
                    f" vs analytic)")
            else:
                log(f"  torch FlopCounterMode {arch}: failed: {res.get('error', '')[:200]}")

    if "tubelet" in peers and not (os.path.isfile(a.tubelet) and os.access(a.tubelet, os.X_OK)):
        data["notes"].append(f"tubelet skipped: {a.tubelet} not found (build it first)")

    raw = []
    for rnd in range(a.rounds):
        for T in a.threads:
            a.threads_cur = T
            for arch in archs:
                for B in a.batch:
                    for peer in peers:
                        t0 = time.time()
                        log(f"{arch} batch {B} threads {T} {peer}"
                            + (f" (round {rnd + 1}/{a.rounds})" if a.rounds > 1 else "") + " ...")
                        row = measure_peer(peer, arch, B, a, data["flops"][arch]["total"], log)
                        row["round"] = rnd + 1
                        raw.append(row)
                        if row["status"] == "ok":
                            log(f"  {row['ms_per_clip']:.0f} ms/clip, {row['gflops']:.1f} GFLOP/s, peak RSS "
                                f"{row['peak_rss_mb']:.0f} MB, other load {fmt(row.get('other_load'), '.2f')} "
                                f"({time.time() - t0:.0f} s)")
                        else:
                            log(f"  {row['status']}: {(row.get('error') or '')[:300]} "
                                f"({time.time() - t0:.0f} s)")
    data["rows"] = combine_rounds(raw, a.rounds, a.max_other)

    data["loadavg_after"] = loadavg()
    data["wall_s"] = time.time() - t_start
    if a.merge:
        have = {(r["arch"], r["batch"], r["threads"], r["peer"]) for r in data["rows"]}
        kept = [r for r in load_previous_rows(a.out)
                if (r["arch"], r["batch"], r["threads"], r["peer"]) not in have]
        if kept:
            data["notes"].append(f"{len(kept)} row(s) kept from an earlier run (--merge); see their dates")
        data["rows"] += kept
        for r in kept:   # the FLOPs table covers the kept rows' archs too (analytic, no cross-check)
            if r["arch"] in ALL_ARCHS and r["arch"] not in data["flops"]:
                data["flops"][r["arch"]] = flops_per_clip(r["arch"])
    for r in data["rows"]:
        if r["peer"] == "torch-compile" and r["status"] != "ok":
            data["notes"].append(f"torch.compile failed for {r['arch']}: {(r.get('error') or '')[:300]}")
    write_results(a.out, render(data))
    log(f"wrote {a.out} "
        f"({data['wall_s'] / 60:.1f} min)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
