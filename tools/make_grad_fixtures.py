#!/usr/bin/env python3
"""Generate gradient references (for the C engine's backward passes) next to existing fixtures.

Usage:
    /work/venv/bin/python tools/make_grad_fixtures.py [--root tests/fixtures] [--only NAME ...]
                                                      [--no-verify] [--check]

For every fixture in GRAD_FIXTURES (the float32, single-file fixtures written by
tools/make_fixtures.py; the f16 / bf16 / sharded / newnames ones are skipped) this reads
tests/fixtures/<name>/{config.json, model.safetensors, input.npy} and writes

    labels.npy          int64 (rows,)   deterministic class labels, one per logits row
                                        (rows = B, except TimeSformer space_only: B*T)
    loss.npy            float32 ()      F.cross_entropy(logits, labels), mean over rows
    grads.safetensors   float32         d loss / d p for EVERY model parameter p, stored under the
                                        tensor name p has in that fixture's model.safetensors

and rewrites tests/fixtures/grad_list.txt (one fixture name per line, those that have grads).

How: XForVideoClassification.from_pretrained(dir, dtype=torch.float64, attn_implementation=...)
(eager for VideoMAE / TimeSformer, SDPA for ViViT, exactly like the forward references of
make_fixtures.py; ViViT's eager path does its softmax in float32 even for a float64 model),
model.eval() (every dropout probability and drop_path_rate in these configs is 0 anyway; eval only
touches Dropout / DropPath modules here, there is no BatchNorm), pixel_values = input.npy as
float64, logits -> cross_entropy -> backward() in float64, gradients cast to float32.

Unless --no-verify, every fixture is also checked:
  * forward logits equal the stored logits.npy (float32 rounding);
  * the key set and shapes of grads.safetensors equal those of model.safetensors, and the
    parameter -> file-name mapping (transformers 5 renames some tensors on load and renames them
    back on save) agrees two independent ways: by value against model.safetensors, and by what
    save_pretrained() writes for each parameter;
  * train() mode gives the same gradients (dropout p = 0 everywhere);
  * HF's own classification loss (labels=...) equals F.cross_entropy;
  * a per-tensor central finite difference of the float64 loss along a random direction agrees with
    <grad, direction> (independent of autograd);
  * VideoMAE: eager and SDPA gradients agree in float64; ViViT: SDPA agrees with an eager path whose
    softmax is done in float64 (the stock eager one, float32 softmax, is reported for information);
  * a float32 run (same attention implementation) is within 2e-5 relative of the float64 gradients
    per tensor (max|g32 - g64| / max|g64|);
  * no gradient is missing, non-finite or all zero; max |g| per tensor kind is printed.

--check recomputes everything and compares with the files on disk instead of writing them.
Computation is single-threaded and seeded, so re-running reproduces the files byte for byte
(for a given torch / transformers).
"""

import argparse
import copy
import json
import os
import re
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import (
    TimesformerForVideoClassification,
    VideoMAEForVideoClassification,
    VivitForVideoClassification,
)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
try:
    hf_logging.disable_progress_bar()
except AttributeError:
    pass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRAD_FIXTURES = [
    "videomae_mean",
    "videomae_cls_noqkvbias",
    "timesformer_divided",
    "timesformer_space_only",
    "timesformer_joint",
    "timesformer_relu_odd",
    "vivit_m1",
    "vivit_odd",
    "videomae_legacy_config",
    "vivit_m1_frames",
]

CLASSES = {
    "videomae": VideoMAEForVideoClassification,
    "timesformer": TimesformerForVideoClassification,
    "vivit": VivitForVideoClassification,
}

LABEL_SEED_OFFSET = 70000  # labels use np.random.default_rng(meta["seed"] + LABEL_SEED_OFFSET)
F32_REL_TOL = 2e-5
FD_REL_TOL = 1e-6


def reference_attn(family):
    return "sdpa" if family == "vivit" else "eager"


def load(d, family, dtype, attn):
    model = CLASSES[family].from_pretrained(d, dtype=dtype, attn_implementation=attn)
    model.eval()  # dropout / drop path off (all p = 0 here anyway)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def read_safetensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def loss_and_grads(model, x, labels):
    model.zero_grad(set_to_none=True)
    logits = model(pixel_values=x).logits
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.grad is None:
            raise AssertionError(f"parameter {n} received no gradient")
        grads[n] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    return loss.detach(), logits.detach(), grads


def make_labels(meta, rows, num_labels):
    rng = np.random.default_rng(meta["seed"] + LABEL_SEED_OFFSET)
    return rng.integers(0, num_labels, size=rows, dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# parameter name -> name in model.safetensors
# ----------------------------------------------------------------------------------------------


def map_by_value(model, file_tensors):
    """Each parameter's values (loaded from the file) match exactly one file tensor."""
    out = {}
    for n, p in model.named_parameters():
        pv = p.detach()
        hits = [k for k, t in file_tensors.items()
                if tuple(t.shape) == tuple(pv.shape) and torch.equal(t.to(pv.dtype), pv)]
        assert len(hits) == 1, f"{n}: {len(hits)} file tensors with equal values: {hits}"
        out[n] = hits[0]
    assert len(set(out.values())) == len(out), "value mapping not injective"
    return out


@torch.no_grad()
def map_by_save(model):
    """Fill every parameter with a distinct constant, save_pretrained(), read back what each became."""
    m = copy.deepcopy(model)
    names = [n for n, _ in m.named_parameters()]
    for i, (n, p) in enumerate(m.named_parameters()):
        p.fill_(float(i + 1))
    with tempfile.TemporaryDirectory() as tmp:
        m.save_pretrained(tmp, safe_serialization=True)
        saved = read_safetensors(os.path.join(tmp, "model.safetensors"))
    out = {}
    for k, t in saved.items():
        vals = torch.unique(t.to(torch.float64))
        assert vals.numel() == 1, f"saved tensor {k} mixes parameters"
        out[names[int(vals.item()) - 1]] = k
    assert len(out) == len(names), "save_pretrained dropped parameters"
    return out


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------


def rel_err(a, ref):
    den = ref.abs().max().item()
    return (a.to(torch.float64) - ref).abs().max().item() / (den if den > 0 else 1.0)


def max_rel(g, ref):
    return max(rel_err(g[n], ref[n]) for n in ref)


@torch.no_grad()
def fd_check(model, x, labels, grads, seed, zero_names):
    """Per-tensor central difference along a random direction vs <grad, direction>.

    Returns the worst |fd - <g, v>| / (|g| |v|) over the ordinary tensors and the worst |fd| / |v|
    over the structurally-zero ones (key biases: the loss must not move along them at all)."""
    gen = torch.Generator().manual_seed(seed)
    worst, worst_zero = 0.0, 0.0
    params = dict(model.named_parameters())
    for n in sorted(params):
        p = params[n]
        v = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        v /= v.abs().max()
        h = 1e-5 * max(1.0, p.abs().max().item())
        p0 = p.detach().clone()
        p.add_(h * v)
        lp = F.cross_entropy(model(pixel_values=x).logits, labels).item()
        p.copy_(p0 - h * v)
        lm = F.cross_entropy(model(pixel_values=x).logits, labels).item()
        p.copy_(p0)
        fd = (lp - lm) / (2 * h)
        an = (grads[n] * v).sum().item()
        if n in zero_names:
            worst_zero = max(worst_zero, abs(fd) / v.norm().item())
            continue
        scale = grads[n].norm().item() * v.norm().item()  # Cauchy-Schwarz bound of |an|
        worst = max(worst, abs(fd - an) / max(scale, 1e-300))
    return worst, worst_zero


def vivit_f64_eager_grads(d, x, labels):
    """ViViT eager attention with the softmax in the model dtype (stock eager forces float32)."""
    from transformers.models.vivit import modeling_vivit as mv

    orig = mv.eager_attention_forward

    def eager64(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        if scaling is None:
            scaling = query.size(-1) ** -0.5
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.softmax(w, dim=-1)
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    mv.eager_attention_forward = eager64
    try:
        m = load(d, "vivit", torch.float64, "eager")
        return loss_and_grads(m, x, labels)[2]
    finally:
        mv.eager_attention_forward = orig


# Gradients that are zero in exact arithmetic: a key bias adds q.b_k to every score of a query row,
# which the softmax cancels.  VideoMAE has no key bias; ViViT with qkv_bias has a separate
# key.bias tensor (whole tensor ~1e-17 noise); TimeSformer's fused qkv.bias has it as rows D..2D.
KEY_BIAS = re.compile(r"(attention\.attention\.key\.bias|attention\.k_proj\.bias)$")


def zero_rows(file_name, shape):
    """Slice of a tensor whose gradient vanishes analytically (None: none)."""
    if KEY_BIAS.search(file_name):
        return slice(0, shape[0])
    if file_name.endswith("attention.attention.qkv.bias"):
        d = shape[0] // 3
        return slice(d, 2 * d)
    return None


def kind_of(name):
    return re.sub(r"\.\d+\.", ".N.", name)


# ----------------------------------------------------------------------------------------------


def make(name, root, verify, check):
    d = os.path.join(root, name)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    family = meta["family"]
    assert meta.get("weights_dtype", "float32") == "float32", f"{name}: not a float32 fixture"
    assert meta["weight_files"] == ["model.safetensors"], f"{name}: not a single-file fixture"
    attn = reference_attn(family)

    file_tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    model = load(d, family, torch.float64, attn)
    assert model.config._attn_implementation == attn
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not any(True for _ in model.buffers()), f"{name}: model has buffers"

    x32 = torch.from_numpy(np.load(os.path.join(d, "input.npy")))
    assert x32.dtype == torch.float32
    x = x32.to(torch.float64)

    with torch.no_grad():
        rows = model(pixel_values=x).logits.shape[0]
    labels_np = make_labels(meta, rows, model.config.num_labels)
    labels = torch.from_numpy(labels_np)

    loss, logits, grads = loss_and_grads(model, x, labels)

    # names as in model.safetensors
    vmap = map_by_value(model, file_tensors)
    out = {}
    for n, g in grads.items():
        k = vmap[n]
        assert tuple(g.shape) == tuple(file_tensors[k].shape), f"{n}->{k}: shape mismatch"
        out[k] = g.to(torch.float32).contiguous()
    assert set(out) == set(file_tensors), f"{name}: key sets differ: {set(out) ^ set(file_tensors)}"
    renamed = sorted((n, k) for n, k in vmap.items() if n != k)

    # per-tensor error measure: max|g - ref| / max|ref|, except for the tensors whose gradient is
    # zero analytically (key biases), which are measured against the largest gradient of the model
    gmax = max(g.abs().max().item() for g in grads.values())
    zsl = {n: zero_rows(vmap[n], tuple(g.shape)) for n, g in grads.items()}
    zero_whole = {n for n, z in zsl.items() if z is not None and z.stop - z.start == grads[n].shape[0]}

    def err(g, n):
        if n in zero_whole:
            return (g[n].to(torch.float64) - grads[n]).abs().max().item() / gmax
        return rel_err(g[n], grads[n])

    def max_err(g):
        return max(err(g, n) for n in grads)

    info = dict(name=name, loss=loss.item(), n=len(out),
                bytes=sum(t.numel() * t.element_size() for t in out.values()),
                labels=labels_np.tolist(), renamed=renamed)

    if verify:
        ref_logits = torch.from_numpy(np.load(os.path.join(d, "logits.npy"))).to(torch.float64)
        info["logits_vs_fixture"] = (logits - ref_logits).abs().max().item()
        assert info["logits_vs_fixture"] < 1e-5, f"{name}: forward disagrees with logits.npy"

        smap = map_by_save(model)
        assert smap == vmap, f"{name}: save_pretrained naming disagrees: " \
            f"{ {n: (vmap[n], smap.get(n)) for n in vmap if smap.get(n) != vmap[n]} }"

        model.train()
        _, _, g_train = loss_and_grads(model, x, labels)
        model.eval()
        info["train_vs_eval"] = max_err(g_train)
        assert info["train_vs_eval"] < 1e-12, f"{name}: train mode changes the gradients"

        try:
            hf_loss = model(pixel_values=x, labels=labels).loss.item()
            info["hf_loss_diff"] = abs(hf_loss - loss.item())
        except Exception as e:  # noqa: BLE001
            info["hf_loss_diff"] = f"{type(e).__name__}: {e}"

        info["fd_rel"], fd_zero = fd_check(model, x, labels, grads, meta["seed"], zero_whole)
        assert info["fd_rel"] < FD_REL_TOL, f"{name}: finite differences disagree ({info['fd_rel']:.3g})"
        if zero_whole:
            info["fd_key_bias"] = fd_zero
            assert fd_zero < 1e-9 * gmax, f"{name}: loss moves along a key bias ({fd_zero:.3g})"

        if family == "videomae":
            g_alt = loss_and_grads(load(d, family, torch.float64, "sdpa"), x, labels)[2]
            info["alt_attn"] = ("sdpa vs eager f64", max_err(g_alt))
            assert info["alt_attn"][1] < 1e-12
        elif family == "vivit":
            g_alt = vivit_f64_eager_grads(d, x, labels)
            info["alt_attn"] = ("eager(f64 softmax) vs sdpa f64", max_err(g_alt))
            assert info["alt_attn"][1] < 1e-12
            g_stock = loss_and_grads(load(d, family, torch.float64, "eager"), x, labels)[2]
            info["stock_eager"] = max_err(g_stock)

        m32 = load(d, family, torch.float32, attn)
        loss32, _, g32 = loss_and_grads(m32, x32, labels)
        info["loss32_rel"] = abs(loss32.item() - loss.item()) / abs(loss.item())
        info["f32_rel"] = max_err(g32)
        info["f32_worst"] = vmap[max(grads, key=lambda n: err(g32, n))]
        assert info["f32_rel"] < F32_REL_TOL, f"{name}: float32 gradients off by {info['f32_rel']:.3g}"

    kinds, zero_max = {}, {}
    for n, g in grads.items():
        assert torch.isfinite(g).all(), f"{name}: {n} has non-finite gradient"
        live = g
        if zsl[n] is not None:
            zm = g[zsl[n]].abs().max().item()
            assert zm <= 1e-12 * gmax, f"{name}: {n}: key-bias gradient not ~0 ({zm:.3g})"
            zero_max[vmap[n]] = zm
            live = torch.cat([g[:zsl[n].start], g[zsl[n].stop:]])
        m = live.abs().max().item() if live.numel() else None
        if m is not None:
            assert m > 1e-6 * gmax, f"{name}: gradient of {n} is degenerate (max {m:.3g}, model max {gmax:.3g})"
        zf = (live == 0).double().mean().item() if live.numel() else 0.0
        k = kind_of(vmap[n])
        lo, hi, z = kinds.get(k, (float("inf"), 0.0, 0.0))
        if m is None:
            lo, hi = zm, zm
        kinds[k] = (min(lo, m if m is not None else lo), max(hi, m if m is not None else hi), max(z, zf))
    info["kinds"], info["analytic_zero_max"] = kinds, zero_max

    files = {
        "labels.npy": labels_np,
        "loss.npy": np.asarray(loss.item(), dtype=np.float32),
    }
    if check:
        for fn, arr in files.items():
            old = np.load(os.path.join(d, fn))
            assert old.dtype == arr.dtype and old.shape == arr.shape and np.array_equal(old, arr), f"{name}/{fn} differs"
        old = read_safetensors(os.path.join(d, "grads.safetensors"))
        assert set(old) == set(out), f"{name}/grads.safetensors: key sets differ"
        for k in out:
            assert old[k].dtype == torch.float32 and old[k].shape == out[k].shape, f"{name}/{k}: dtype/shape"
        ndiff = sum(not torch.equal(old[k], out[k]) for k in out)
        inv = {k: n for n, k in vmap.items()}
        info["check_max_rel"] = max_err({inv[k]: old[k] for k in out}) if ndiff else 0.0
        info["check_differing_tensors"] = ndiff
        assert ndiff == 0 or info["check_max_rel"] < 1e-6, \
            f"{name}/grads.safetensors differs ({ndiff} tensors, {info['check_max_rel']:.3g})"
    else:
        for fn, arr in files.items():
            np.save(os.path.join(d, fn), arr, allow_pickle=False)
        save_file(out, os.path.join(d, "grads.safetensors"),
                  metadata={"format": "pt"})  # one key only: safetensors orders several randomly
        for fn in ("labels.npy", "loss.npy", "grads.safetensors"):
            os.chmod(os.path.join(d, fn), 0o644)
    return info


def report(info):
    print(f"== {info['name']}: loss {info['loss']:.9g}  tensors {info['n']}  bytes {info['bytes']}  "
          f"labels {info['labels']}")
    if info["renamed"]:
        pats = sorted({(kind_of(a), kind_of(b)) for a, b in info["renamed"]})
        print(f"   {len(info['renamed'])} parameters renamed (in-memory -> file): "
              + ", ".join(f"{a} -> {b}" for a, b in pats))
    for key in ("logits_vs_fixture", "train_vs_eval", "hf_loss_diff", "fd_rel", "alt_attn", "stock_eager",
                "fd_key_bias", "loss32_rel", "f32_rel", "f32_worst", "check_differing_tensors", "check_max_rel"):
        if key in info:
            v = info[key]
            if isinstance(v, float):
                v = f"{v:.3g}"
            elif isinstance(v, tuple):
                v = f"{v[0]}: {v[1]:.3g}"
            print(f"   {key}: {v}")
    for k, v in sorted(info["analytic_zero_max"].items()):
        print(f"   analytically zero (key bias): {k}: max|g| {v:.3g}")
    print("   max|g| per tensor kind (min over layers .. max over layers; max fraction of exact zeros):")
    for k in sorted(info["kinds"]):
        lo, hi, z = info["kinds"][k]
        zs = f"  zeros {z:.3f}" if z > 0 else ""
        print(f"     {k:70s} {lo:.3e} .. {hi:.3e}{zs}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--only", nargs="+", default=None)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    names = args.only or GRAD_FIXTURES
    for n in names:
        if n not in GRAD_FIXTURES:
            sys.exit(f"unknown / unsupported fixture {n}; choose from {GRAD_FIXTURES}")

    total = 0
    for n in names:
        info = make(n, args.root, verify=not args.no_verify, check=args.check)
        report(info)
        if not args.check:
            total += sum(os.path.getsize(os.path.join(args.root, n, fn))
                         for fn in ("labels.npy", "loss.npy", "grads.safetensors"))

    if not args.check:
        # the TimeSformer L+G / axial fixtures come from tools/timesformer_variants_ref.py and
        # ViViT Models 2-4 from tools/vivit_variants_ref.py: kept
        from vivit_variants_ref import FIXTURE_NAMES as variant_names
        variants = ["timesformer_local_global_odd", "timesformer_axial_odd"] + variant_names
        have = [n for n in GRAD_FIXTURES + variants
                if os.path.exists(os.path.join(args.root, n, "grads.safetensors"))]
        with open(os.path.join(args.root, "grad_list.txt"), "w") as f:
            f.write("".join(n + "\n" for n in have))
        print(f"wrote {len(names)} fixtures ({total} bytes on disk); grad_list.txt lists {len(have)}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
