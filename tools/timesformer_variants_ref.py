#!/usr/bin/env python3
"""PyTorch reference for TimeSformer's sparse local-global ("L+G") and axial ("T+W+H") attention
(Bertasius et al. 2021, Fig. 1 and section 3), and the fixtures tubelet's tests compare against.

Usage:
    /work/venv/bin/python tools/timesformer_variants_ref.py [--out tests/fixtures] [--check]

Neither scheme exists in Hugging Face transformers or in the official code; the token sets,
parameter names and cls-token rule are those of docs/timesformer-variants.md, written here from
the paper's equations and not from tubelet's C code: each attention step takes the patch grid
(B, H, W, T, D) apart by *slicing* it (a row, a column, a quadrant, a stride-2 sub-grid), runs
Hugging Face's own modules (TimeSformerAttention: fused qkv + output dense; nn.LayerNorm;
TimesformerIntermediate / TimesformerOutput; TimesformerEmbeddings) on each group, and puts the
results back by the same slices. tubelet instead builds index tables once
(src/models/timesformer.c, src/models/forward.c).

A block of attention type
    divided_space_time  time, space                 (Hugging Face's own layer: the check below)
    axial               time, width, height
    local_global        local (F x H/2 x W/2 windows), global (stride 2 in t, y, x)
runs its steps in order, each  z += dense(Attention(LN(z)))  over its groups (no dense in the last
step), then the MLP. The cls token joins every group of every step except the time steps; its
update is the mean of its outputs over the groups of the step.

For every fixture this writes tests/fixtures/<name>/ with
    config.json, model.safetensors     (attention_type "axial" / "local_global"; tensor names as
                                        docs/timesformer-variants.md lists them)
    input.npy                          float32 pixel_values (B, T, C, H, W)
    logits.npy, hidden.npy             float64 forward, saved as float32 (hidden: after the final
    hidden_layer1.npy                  LayerNorm; layer1: the output of block 1, no LayerNorm)
    labels.npy, loss.npy               int64 labels, the mean cross-entropy (float32)
    grads.safetensors                  float64 autograd gradient of the loss for every parameter,
                                       saved as float32 under the parameter's file name
    meta.json
and adds the names to list.txt and grad_list.txt. Parameters are randomised as make_fixtures.py
does (LayerNorm weights 1 + 0.2 N(0,1), biases 0.1 N(0,1), ...).

Checks run every time (and fail the script):
  * the same code, given attention_type divided_space_time, reproduces Hugging Face's
    TimesformerForVideoClassification (logits and every gradient, float64) on a random model with
    an odd grid: the slicing, the cls averaging, dense placement and embeddings are HF's;
  * a float32 run agrees with the float64 reference;
  * per tensor, a central finite difference of the float64 loss along a random direction agrees
    with <grad, direction>;
  * every group of every step has the size the token sets give (counted independently here).
--check recomputes and compares with the files on disk instead of writing.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import add_to_list, seal_fixture  # noqa: E402
from transformers import TimesformerConfig, TimesformerForVideoClassification
from transformers.models.timesformer.modeling_timesformer import (
    TimeSformerAttention,
    TimesformerEmbeddings,
    TimesformerIntermediate,
    TimesformerOutput,
)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import randomize_  # noqa: E402  (the fixtures' randomisation, shared)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_BASE = dict(patch_size=2, num_channels=3, hidden_size=16, num_attention_heads=2,
             num_hidden_layers=2, intermediate_size=32, layer_norm_eps=1e-6, qkv_bias=True,
             hidden_act="gelu", num_labels=5)

FIXTURES = [
    dict(name="timesformer_local_global_odd", seed=2101, batch=2,
         config=dict(_BASE, attention_type="local_global", image_size=[10, 14], num_frames=3),
         note="TimeSformer sparse local-global (L+G): 3 frames of a 5 x 7 patch grid (odd: the "
              "local windows are 3 or 2 rows by 4 or 3 columns, all frames; the stride-2 global "
              "groups have 1 or 2 frames, 3 or 2 rows, 4 or 3 columns), cls in every group of both "
              "steps (mean over 4 and 8 groups); hidden 16, 2 heads, 2 layers, B = 2."),
    dict(name="timesformer_axial_odd", seed=2102, batch=2,
         config=dict(_BASE, attention_type="axial", image_size=[6, 10], num_frames=4,
                     hidden_act="gelu_new"),
         note="TimeSformer axial (T+W+H): 4 frames of a 3 x 5 patch grid (width groups of 5 + cls, "
              "height groups of 3 + cls, time groups of 4 without cls), gelu_new; hidden 16, 2 "
              "heads, 2 layers, B = 2."),
]

LABEL_SEED_OFFSET = 70000


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------

# The steps of each scheme: (parameter prefix, token set, cls joins). Prefix "" is the block's own
# layernorm_before + attention, without a dense layer.
STEPS = {
    "divided_space_time": [("temporal_", "time", False), ("", "space", True)],
    "axial": [("temporal_", "time", False), ("width_", "width", True), ("", "height", True)],
    "local_global": [("local_", "local", True), ("", "global", True)],
}


def groups(kind, H, W, T):
    """The groups of a step as slices of the (B, H, W, T, D) patch grid: (y, x, t) index tuples.

    time:   one position (y, x), all frames             (paper: k_(p, t'), t' = 1..F)
    space:  one frame t, all positions                   (paper: k_(p', t), p' = 1..N)
    width:  one frame t and row y, all columns
    height: one frame t and column x, all rows
    local:  all frames of one quadrant: rows [0, ceil(H/2)) or [ceil(H/2), H), columns likewise
    global: every second frame, row and column, starting at (t0, y0, x0) in {0, 1}^3
    Empty groups (a grid side of 1) are left out."""
    a = slice(None)
    if kind == "time":
        out = [(y, x, a) for y in range(H) for x in range(W)]
    elif kind == "space":
        out = [(a, a, t) for t in range(T)]
    elif kind == "width":
        out = [(y, a, t) for t in range(T) for y in range(H)]
    elif kind == "height":
        out = [(a, x, t) for t in range(T) for x in range(W)]
    elif kind == "local":
        hy, hx = (H + 1) // 2, (W + 1) // 2
        out = [(ys, xs, a) for ys in (slice(0, hy), slice(hy, H)) for xs in (slice(0, hx), slice(hx, W))]
    elif kind == "global":
        out = [(slice(y0, None, 2), slice(x0, None, 2), slice(t0, None, 2))
               for t0 in (0, 1) for y0 in (0, 1) for x0 in (0, 1)]
    else:
        raise ValueError(kind)
    probe = torch.zeros(H, W, T)
    return [g for g in out if probe[g].numel() > 0]


def group_sizes(kind, H, W, T):
    """Group sizes counted by testing every token against the token-set definition (not slicing)."""
    hy, hx = (H + 1) // 2, (W + 1) // 2
    key = {
        "time": lambda t, y, x: (y, x),
        "space": lambda t, y, x: t,
        "width": lambda t, y, x: (t, y),
        "height": lambda t, y, x: (t, x),
        "local": lambda t, y, x: (y >= hy, x >= hx),
        "global": lambda t, y, x: (t % 2, y % 2, x % 2),
    }[kind]
    sizes = {}
    for t in range(T):
        for y in range(H):
            for x in range(W):
                k = key(t, y, x)
                sizes[k] = sizes.get(k, 0) + 1
    return sorted(sizes.values())


class VariantLayer(nn.Module):
    def __init__(self, config, attention_type):
        super().__init__()
        self.steps_spec = STEPS[attention_type]
        # Hugging Face's names: layernorm_before / attention for the last step, <prefix>layernorm,
        # <prefix>attention, <prefix>dense for the others
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = TimeSformerAttention(config)
        for prefix, _, _ in self.steps_spec:
            if prefix:
                setattr(self, prefix + "layernorm", nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
                setattr(self, prefix + "attention", TimeSformerAttention(config))
                setattr(self, prefix + "dense", nn.Linear(config.hidden_size, config.hidden_size))
        self.intermediate = TimesformerIntermediate(config)
        self.output = TimesformerOutput(config)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def step(self, prefix, kind, with_cls, cls, grid):
        """grid (B, H, W, T, D) and cls (B, 1, D) -> their values after the step."""
        ln = getattr(self, prefix + "layernorm") if prefix else self.layernorm_before
        attn = getattr(self, prefix + "attention") if prefix else self.attention
        dense = getattr(self, prefix + "dense") if prefix else None
        B, H, W, T, D = grid.shape
        delta = torch.zeros_like(grid)
        cls_outs = []
        for g in groups(kind, H, W, T):
            sub = grid[(slice(None),) + g]                 # (B, ..., D)
            z = sub.reshape(B, -1, D)
            if with_cls:
                z = torch.cat([cls, z], 1)
            y = attn(ln(z))[0]
            if dense is not None:
                y = dense(y)
            if with_cls:
                cls_outs.append(y[:, :1])
                y = y[:, 1:]
            delta[(slice(None),) + g] = y.reshape(sub.shape)
        if with_cls:
            cls = cls + torch.stack(cls_outs, 0).mean(0)   # averaged over the step's groups
        return cls, grid + delta

    def forward(self, hidden, grid_hw, T):
        H, W = grid_hw
        B, _, D = hidden.shape
        cls = hidden[:, :1]
        # Hugging Face's token order: cls, then (position n = y W + x, frame t), t fastest
        grid = hidden[:, 1:].reshape(B, H, W, T, D)
        for prefix, kind, with_cls in self.steps_spec:
            cls, grid = self.step(prefix, kind, with_cls, cls, grid)
        h = torch.cat([cls, grid.reshape(B, H * W * T, D)], 1)
        return h + self.output(self.intermediate(self.layernorm_after(h)))


class Encoder(nn.Module):
    def __init__(self, config, attention_type):
        super().__init__()
        self.layer = nn.ModuleList(VariantLayer(config, attention_type) for _ in range(config.num_hidden_layers))


class Base(nn.Module):
    def __init__(self, config, attention_type):
        super().__init__()
        self.embeddings = TimesformerEmbeddings(config)
        self.encoder = Encoder(config, attention_type)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class VariantForVideoClassification(nn.Module):
    """Parameter names are those of TimesformerForVideoClassification plus the new steps'."""

    def __init__(self, config, attention_type):
        super().__init__()
        self.config = config
        self.timesformer = Base(config, attention_type)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pixel_values, n_layers=None):
        """logits, last_hidden_state, and the output of block 1 (no final LayerNorm)."""
        c = self.config
        img = c.image_size if isinstance(c.image_size, (list, tuple)) else (c.image_size, c.image_size)
        H, W, T = img[0] // c.patch_size, img[1] // c.patch_size, pixel_values.shape[1]
        h = self.timesformer.embeddings(pixel_values)
        after = []
        for layer in self.timesformer.encoder.layer:
            h = layer(h, (H, W), T)
            after.append(h)
        hidden = self.timesformer.layernorm(h)
        return self.classifier(hidden[:, 0]), hidden, after[0]


def hf_config(cfg):
    c = TimesformerConfig(**{k: v for k, v in cfg.items() if k != "attention_type"},
                          attention_type="divided_space_time")  # only its sizes are used here
    c.image_size = cfg["image_size"]
    return c


def build(cfg, seed):
    torch.manual_seed(seed)
    model = VariantForVideoClassification(hf_config(cfg), cfg["attention_type"])
    gen = torch.Generator().manual_seed(seed)
    randomize_(model, gen)
    return model.eval(), gen


def loss_and_grads(model, x, labels):
    model.zero_grad(set_to_none=True)
    logits, hidden, layer1 = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    return loss, logits, hidden, layer1, {n: p.grad.detach().clone() for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------

def check_against_hf():
    """The reference given divided_space_time equals Hugging Face's TimesformerForVideoClassification
    (float64, odd 3 x 3 grid, 3 frames): logits and all gradients."""
    cfg = dict(_BASE, attention_type="divided_space_time", image_size=6, num_frames=3)
    ours, gen = build(cfg, 2199)
    hf = TimesformerForVideoClassification(TimesformerConfig(**cfg)).eval()
    missing = hf.load_state_dict(ours.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    ours, hf = ours.double(), hf.double()
    x = torch.randn((2, 3, 3, 6, 6), generator=gen, dtype=torch.float64)
    labels = torch.tensor([1, 4])
    l1, lg1, h1, _, g1 = loss_and_grads(ours, x, labels)
    hf.zero_grad(set_to_none=True)
    out = hf(pixel_values=x, output_hidden_states=True)
    F.cross_entropy(out.logits, labels).backward()
    g2 = {n: p.grad for n, p in hf.named_parameters()}
    assert set(g1) == set(g2)
    e_logits = (lg1 - out.logits).abs().max().item()
    e_hidden = (h1 - hf.timesformer(x).last_hidden_state).abs().max().item()
    e_grad = max(((g1[n] - g2[n]).abs().max() / g2[n].abs().max().clamp_min(1e-30)).item() for n in g1
                 if ".qkv.bias" not in n)  # the key bias: zero in exact arithmetic
    print(f"divided_space_time vs Hugging Face (float64): logits {e_logits:.1e}, hidden {e_hidden:.1e}, "
          f"gradients {e_grad:.1e} relative")
    assert e_logits < 1e-12 and e_hidden < 1e-12 and e_grad < 1e-10, "the reference is not Hugging Face's divided"


def check_sizes(cfg):
    img, p = cfg["image_size"], cfg["patch_size"]
    H, W, T = img[0] // p, img[1] // p, cfg["num_frames"]
    for _, kind, _ in STEPS[cfg["attention_type"]]:
        probe = torch.zeros(H, W, T)
        sliced = sorted(probe[g].numel() for g in groups(kind, H, W, T))
        assert sliced == group_sizes(kind, H, W, T), (kind, sliced, group_sizes(kind, H, W, T))
        print(f"  {kind:6s} groups per clip {len(sliced):3d}, sizes {sorted(set(sliced))}")


def fd_check(model, x, labels, grads, seed):
    """Per tensor: central difference of the float64 loss along a random direction vs <g, v>."""
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, p in params.items():
            v = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            h = 1e-5
            p += h * v
            lp = F.cross_entropy(model(x)[0], labels).item()
            p -= 2 * h * v
            lm = F.cross_entropy(model(x)[0], labels).item()
            p += h * v
            fd, an = (lp - lm) / (2 * h), (grads[n] * v).sum().item()
            scale = grads[n].norm().item() * v.norm().item()
            if scale > 1e-12 * max(g.norm().item() for g in grads.values()):
                worst = max(worst, abs(fd - an) / scale)
    return worst


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------

def config_json(cfg):
    out = {k: v for k, v in cfg.items() if k != "num_labels"}
    out.update(model_type="timesformer", architectures=["TimesformerForVideoClassification"],
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
               id2label={str(i): f"LABEL_{i}" for i in range(cfg["num_labels"])},
               label2id={f"LABEL_{i}": i for i in range(cfg["num_labels"])})
    return dict(sorted(out.items()))


def save_npy(path, arr, dtype=np.float32):
    np.save(path, np.array(arr, dtype=dtype, order="C"), allow_pickle=False)  # keeps 0-d 0-d


def make(spec, root, check):
    name, cfg = spec["name"], spec["config"]
    print(name)
    check_sizes(cfg)
    model, gen = build(cfg, spec["seed"])
    img = cfg["image_size"]
    x = torch.randn((spec["batch"], cfg["num_frames"], cfg["num_channels"], img[0], img[1]), generator=gen,
                    dtype=torch.float32)
    labels = torch.from_numpy(np.random.default_rng(spec["seed"] + LABEL_SEED_OFFSET)
                              .integers(0, cfg["num_labels"], spec["batch"]))
    weights = {n: p.detach().float().contiguous() for n, p in model.named_parameters()}
    m64 = model.double()
    x64 = x.double()
    loss, logits, hidden, layer1, grads = loss_and_grads(m64, x64, labels)
    # float32 against float64
    m32, _ = build(cfg, spec["seed"])
    l32, _, _, _, g32 = loss_and_grads(m32, x, labels)
    e32 = max(((g32[n].double() - grads[n]).abs().max() / grads[n].abs().max()).item() for n in grads
              if ".qkv.bias" not in n)
    fd = fd_check(m64, x64, labels, grads, spec["seed"])
    print(f"  loss {loss.item():.8f}; float32 loss {l32.item():.8f}, gradients {e32:.1e} relative; "
          f"finite differences {fd:.1e}; {len(grads)} tensors")
    assert e32 < 2e-4 and fd < 1e-6, "reference self-checks failed"

    outputs = {
        "input.npy": x.numpy(),
        "logits.npy": logits.detach().numpy(),
        "hidden.npy": hidden.detach().numpy(),
        "hidden_layer1.npy": layer1.detach().numpy(),
        "loss.npy": np.array(loss.item()),
    }
    d = os.path.join(root, name)
    if check:
        for fn, arr in outputs.items():
            old = np.load(os.path.join(d, fn))
            assert np.array_equal(old, np.asarray(arr, dtype=np.float32)), f"{name}/{fn} differs"
        assert np.array_equal(np.load(os.path.join(d, "labels.npy")), labels.numpy())
        for fn, ref in (("model.safetensors", weights), ("grads.safetensors", grads)):
            old = load_file(os.path.join(d, fn))
            assert set(old) == set(ref) and all(torch.equal(old[k], ref[k].float()) for k in ref), f"{name}/{fn} differs"
        print("  files on disk: identical")
        return
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(cfg), f, indent=2)
        f.write("\n")
    save_file(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    save_file({n: g.float().contiguous() for n, g in grads.items()}, os.path.join(d, "grads.safetensors"),
              metadata={"format": "pt"})
    for fn, arr in outputs.items():
        save_npy(os.path.join(d, fn), arr)
    save_npy(os.path.join(d, "labels.npy"), labels.numpy(), np.int64)
    meta = dict(family="timesformer", note=spec["note"], seed=spec["seed"], weights_dtype="float32",
                input_shape=list(x.shape), logits_shape=list(logits.shape), hidden_shape=list(hidden.shape),
                labels=labels.tolist(), loss=loss.item(),
                expected="float64 forward and autograd of tools/timesformer_variants_ref.py, saved as float32",
                generated_with=dict(torch=torch.__version__, transformers=transformers.__version__))
    print(f"  wrote {d} ({seal_fixture(d, meta)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    check_against_hf()
    for spec in FIXTURES:
        make(spec, args.out, args.check)
    if not args.check:
        names = [s["name"] for s in FIXTURES]
        add_to_list(os.path.join(args.out, "list.txt"), names)
        add_to_list(os.path.join(args.out, "grad_list.txt"), names)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
